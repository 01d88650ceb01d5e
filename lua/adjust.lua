-- adjust.lua: cancel a reservation, or settle it at its actual cost.
--
-- Cancel gives the costs back as x/time/rate's CancelAt does, band by band:
-- a bucket gets back what later reservations have not already built on,
-- never more than the reservation took nor more than the burst, never once
-- the slot has passed, and never into a pause; a window gets its units back
-- if it is still the latest window and the slot has not passed.
--
-- Settle replaces the costs reserved with the actual ones, unit by unit. A
-- larger actual cost moves each bucket's schedule later by the difference
-- (later reservations pay for it) and adds it to the window, if that is
-- still the latest; a smaller one gives back what later reservations have
-- not built on, under Cancel's rule, whether or not the slot has passed (the
-- call was made at the slot; what it did not use is given back).
--
-- KEYS[1..2], ARGV[1..opi-1]: see core.lua.
-- KEYS[3]  the reservations already adjusted on this key: a string of their
--          numbers, space-separated (the last 32), so that an adjustment run
--          twice (a client that resent it) changes nothing the second time
-- KEYS[4]  optional: a hold (claim.lua) to delete with the reservation
-- ARGV[opi]   "cancel" or "settle"
-- ARGV[opi+1] the reservation's slot: integer Unix µs
-- ARGV[opi+2] its sub-µs part in ns (0..999)
-- ARGV[opi+3] its number (reserve.lua's seq), or for a reservation the
--             caller's local fallback granted, an id of its own (no spaces,
--             not all digits): it identifies the reservation in KEYS[3]
-- then one cost per unit as reserved, then (settle) one actual cost per
--          unit, in ARGV[4]'s order (decimal >= 0)
-- Reply    1 when applied, 0 when this reservation was adjusted before
-- Errors   PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG (see core.lua).

local op = ARGV[opi]
local slot_us, slot_ns, rseq = tonumber(ARGV[opi + 1]), tonumber(ARGV[opi + 2]), ARGV[opi + 3]
local reserved = cost_arg(opi + 4)
local actual = {}
if op == 'settle' then
  actual = cost_arg(opi + 4 + nunits)
elseif op ~= 'cancel' then
  return redis.error_reply('PACER_ARG want cancel or settle')
end
if not finite(slot_us) or not finite(slot_ns) or not reserved or not actual or not string.match(rseq or '', '^%S+$') or nbands < 1 then
  return redis.error_reply('PACER_ARG bad slot, id or costs')
end

local done = redis.pcall('GET', KEYS[3])
if type(done) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the adjusted-reservations key holds another type')
end
local seen = {}
for s in string.gmatch(done or '', '%S+') do
  if s == rseq then
    return 0
  end
  seen[#seen + 1] = s
end
if #KEYS >= 4 then
  redis.call('DEL', KEYS[4])
end

-- The slot as the reservation was told it: slots lie on a ns grid
-- (core.lua's grid), so it is exact; less what a resume moved it by.
local slot = (slot_us - now_us) + slot_ns / 1000 - now_frac - resumed(rseq)
local passed = slot < -same_us
local changed = false
for i = 1, nbands do
    local b = bands[i]
  local c = reserved[b.unit] or 0
  local a = actual[b.unit]
  local d -- the change: negative gives back
  if op == 'cancel' then
    if not passed then
      d = -c
    end
  elseif a then
    d = a - c
  end
  if d and d ~= 0 and b.bucket then
    if d > 0 then
      b.z = b.z + d * b.upp
    else
      -- Units reserved after this reservation (their slots lie between ours
      -- and the last event) are not given back. Both slots sit on the ns
      -- grid, each up to 1 ns after its exact time, so unless they are the
      -- same slot their distance is counted 1 ns longer: a cancel never
      -- gives back more than its exact share (it would otherwise, by up to
      -- 1 ns of rate each time, and many cancels add up). The units built
      -- on are counted at the whole rate's spacing, whatever this caller's
      -- share: a later reservation of a caller at the whole rate builds on
      -- more than one at a share's longer spacing, and counted at that one
      -- a cancel gave back time the whole-rate caller then took again.
      local gap = b.e - slot
      if gap >= same_us then
        gap = gap + 0.001
      end
      local back = c - gap * b.rate / 1000000
      if back > -d then
        back = -d
      end
      if back > 0 then
        local tokens = -b.z / b.upp + back
        if tokens > b.eff then
          tokens = b.eff -- the burst at the share
        end
        local z = -tokens * b.upp
        if pause > 0 and z < pause then
          z = pause -- never into a pause
        end
        b.z = z
        -- A cancel of the last reservation moves the last event back to
        -- the one before it, as long as that has not passed. The last event
        -- is kept exact, and the slot told is it rounded up to the ns grid
        -- (core.lua's grid): the reservation is the last if its slot lies
        -- within a ns after the last event (and half a ns of float noise
        -- either side). The one before is counted from the exact time.
        local off = slot - b.e
        if op == 'cancel' and off > -same_us and off < 0.001 + same_us then
          local prev = b.e - c * b.upp
          if prev >= -same_us then
            b.e = math.max(prev, 0)
          end
        end
      end
    end
    changed = true
  elseif d and d ~= 0 then
    local w = b.cur + math.floor((b.rem + slot) / b.len)
    if w == b.w and w >= b.cur then
      b.u = math.max(0, b.u + d)
      changed = true
    end
  end
end
if changed then
  save()
end
seen[#seen + 1] = rseq
while #seen > 32 do
  table.remove(seen, 1)
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 1000 then
  ttl = 1000
end
redis.call('SET', KEYS[3], table.concat(seen, ' '), 'PX', ttl)
return 1
