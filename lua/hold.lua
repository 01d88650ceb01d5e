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
-- Reply    flat array, six entries per holder in KEYS order:
--            wait_us    integer µs from now to the slot (rounded as in
--                       claim.lua)
--            from       1 the holder already held this slot, 0 fresh,
--                       2 fresh after a stale hold was dropped
--            n          the slot's permits
--            slot_us, slot_frac, seq  the slot and the reservation's
--                       number, as reserve.lua returns them

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
  holds[i] = redis.call('HMGET', KEYS[i + 1], 'slot', 'slotf', 'n', 'seq')
end

-- First pass, no writes: which holds are kept, and the fresh slots.
local out = {}
local new_z = z
local fresh = {} -- {i, slot, n} for each holder given a fresh slot
for i = 1, m do
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
      out[i] = {w, 1, tonumber(h[3]) or n, h[1], h[2], tonumber(h[4]) or 0}
    else
      from = 2
    end
  end
  if not kept then
    local slot
    new_z, slot = take(new_z, n)
    if not new_z then
      return redis.error_reply('ERR pacer: queue too long')
    end
    table.insert(fresh, {i, slot, n})
    out[i] = {math.ceil(slot), from, n}
  end
end

-- Second pass: reserve the fresh slots and record every hold.
if #fresh > 0 then
  local seq = commit(new_z, fresh[#fresh][2], #fresh)
  for k, f in ipairs(fresh) do
    local i, slot, n = f[1], f[2], f[3]
    local slot_us, slot_frac = abs(slot)
    local hold_key = KEYS[i + 1]
    local this_seq = seq + k - 1
    redis.call('HSET', hold_key, 'slot', slot_us, 'slotf', slot_frac, 'n', string.format('%d', n),
      'seq', string.format('%d', this_seq))
    redis.call('PEXPIRE', hold_key, string.format('%d', math.ceil((slot + stale_us) / 1000) + 1))
    table.insert(out[i], slot_us)
    table.insert(out[i], slot_frac)
    table.insert(out[i], this_seq)
  end
end

local flat = {}
for i = 1, m do
  for _, v in ipairs(out[i]) do
    table.insert(flat, v)
  end
end
return flat
