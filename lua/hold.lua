-- hold.lua: reserve a slot for each of several holders (jobs, by ID) in one
-- call, in order, and record each slot under its holder so that claim.lua
-- hands it over later. A holder that already has a live hold keeps it (the
-- call can be repeated after a partial failure without reserving twice); a
-- hold more than stale_us in the past is replaced by a fresh slot.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- KEYS[2..m+1]  one hold per holder (see claim.lua), in the bucket's hash tag
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  stale_us: integer µs >= 0; each hold's time to live after its slot
-- ARGV[6..m+5]  n for each holder, integer 1..burst
-- Reply    flat array, five entries per holder in KEYS order:
--            wait_us    integer µs from now to the slot (rounded as in
--                       claim.lua)
--            from       1 the holder already held this slot, 0 fresh,
--                       2 fresh after a stale hold was dropped
--            n          the slot's permits
--            slot_us, slot_frac  the slot, as reserve.lua returns it

local stale_us = tonumber(ARGV[5])
if not stale_us or stale_us < 0 then
  return redis.error_reply('ERR pacer: stale_us must be non-negative')
end
local m = #KEYS - 1
if #ARGV ~= m + 5 then
  return redis.error_reply('ERR pacer: one n per holder')
end
for i = 1, m do
  if not n_arg(5 + i) then
    return redis.error_reply('ERR pacer: n must be between 1 and burst')
  end
end

-- Read every hold before writing anything: HMGET raises WRONGTYPE on a key
-- that is not a hash, and a script is not rolled back, so an error must come
-- before the first write.
local holds = {}
for i = 1, m do
  holds[i] = redis.call('HMGET', KEYS[i + 1], 'slot', 'slotf', 'n')
end

local out = {}
local new_z = z
local last_slot = nil
for i = 1, m do
  local hold_key = KEYS[i + 1]
  local n = n_arg(5 + i)
  local h = holds[i]
  local from = 0
  local kept = false
  if h[1] then
    local s = rel(h[1], h[2])
    if s >= -stale_us then
      kept = true
      local w
      if s < 0 then
        w = -math.floor(-s)
      else
        w = math.ceil(s)
      end
      table.insert(out, w)
      table.insert(out, 1)
      table.insert(out, tonumber(h[3]) or n)
      table.insert(out, h[1])
      table.insert(out, h[2])
    else
      from = 2
    end
  end
  if not kept then
    new_z = new_z + n * us_per_permit
    local slot = new_z
    if slot < 0 then
      slot = 0
    end
    last_slot = slot
    local slot_us, slot_frac = abs(slot)
    redis.call('HSET', hold_key, 'slot', slot_us, 'slotf', slot_frac, 'n', string.format('%d', n))
    redis.call('PEXPIRE', hold_key, string.format('%d', math.ceil((slot + stale_us) / 1000) + 1))
    table.insert(out, math.ceil(slot))
    table.insert(out, from)
    table.insert(out, n)
    table.insert(out, slot_us)
    table.insert(out, slot_frac)
  end
end

if last_slot then
  save(new_z, last_slot)
end
return out
