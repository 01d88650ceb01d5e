-- cancel.lua: give back the permits of a reservation (x/time/rate CancelAt).
-- Restores what later reservations have not already built on, never more than
-- the reservation's n nor the burst, never once the slot has passed, and never
-- into a pause.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  n, the reservation's permits, integer 1..burst
-- ARGV[6]  the reservation's slot_us, as reserve.lua returned it
-- ARGV[7]  the reservation's slot_frac, as reserve.lua returned it
-- ARGV[8]  the reservation's seq, as reserve.lua returned it
-- Reply    the permits restored, as a decimal string ("0" when nothing changed)
--
-- Idempotent: a client may send a script again after a read timeout, and a
-- cancel applied twice would give back twice. The numbers of the last 16
-- cancels are kept in the hash; a repeat changes nothing.

local n = n_arg(5)
if not n then
  return redis.error_reply('ERR pacer: n must be between 1 and burst')
end
if not state[1] or not state[3] then
  return '0'
end
-- Times within a nanosecond are the same instant (x/time/rate compares
-- whole nanoseconds). State kept in doubles of µs carries rounding of about
-- 1e-6 µs at low rates (a permit every ten minutes, a burst of hours), so an
-- exact comparison with 0 would decide by that rounding (PACER_SEED
-- 1795336153413353379 in the differential test: a whole token).
local same_us = 0.001

local slot = rel(ARGV[6], ARGV[7])
if slot < -same_us then
  return '0'
end
local seq = ARGV[8]
local canceled = {}
for s in string.gmatch(state[7] or '', '%d+') do
  if s == seq then
    return '0'
  end
  table.insert(canceled, s)
end

-- Permits reserved after this one (their slots lie between ours and the last
-- event) are not restored.
local ev = rel(state[3], state[4])
local restore = n - (ev - slot) / us_per_permit
if restore <= 0 then
  return '0'
end
if restore > n then
  restore = n
end

local tokens = -z / us_per_permit + restore
if tokens > burst then
  tokens = burst
end
local new_z = -tokens * us_per_permit
if state[5] then
  local pause = rel(state[5], state[6])
  if new_z < pause then
    new_z = pause
  end
end

-- If this was the last reservation, the last event moves back to the one
-- before it, as long as that is not yet past. "The last" and "past" are to
-- within a nanosecond (same_us): a last event moved back by a cancel is
-- computed, and may differ from the previous reservation's slot in its last
-- bits. Otherwise ev is left as it is.
local new_ev = nil
if math.abs(ev - slot) < same_us then
  local prev = slot - n * us_per_permit
  if prev >= -same_us then
    new_ev = math.max(prev, 0)
  end
end

save(new_z, new_ev)
table.insert(canceled, seq)
while #canceled > 16 do
  table.remove(canceled, 1)
end
redis.call('HSET', key, 'cx', table.concat(canceled, ' '))
return string.format('%.17g', restore)
