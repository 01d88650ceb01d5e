-- claim.lua: hand a holder (a job, by its ID) the slot held for it, or a fresh
-- one; a slot too far away is kept for the holder (hold) or refused.
--
-- A hold is a slot reserved for one holder and recorded under its ID, so the
-- holder redeems it later instead of reserving a second slot (a job
-- rescheduled to its slot, or enqueued for it by hold.lua). A hold more than
-- stale_us in the past is dropped (its holder was not there to use it) and a
-- fresh slot is reserved instead, so a backlog drains at the rate.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- KEYS[2]  the holder's hold, a hash in the bucket's hash tag
--          (bucket key .. ':hold:' .. id). Fields: slot, slotf (the slot,
--          integer Unix µs written with %d and its fraction), n (permits),
--          seq (the reservation's number, see reserve.lua).
--          It expires stale_us after its slot.
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  n, permits, integer 1..burst (used for a fresh slot; a redeemed
--          hold keeps the n it was reserved with)
-- ARGV[6]  max_wait_us: integer µs >= 0. A slot at most this far away is
--          handed over: the hold, if any, is deleted.
-- ARGV[7]  "1": a slot further away is held for the holder (a fresh one is
--          reserved and recorded; an existing hold is kept).
--          "0": a slot further away is refused: nothing is reserved and an
--          existing hold is kept.
-- ARGV[8]  stale_us: integer µs >= 0; the lateness beyond which a hold is
--          dropped, and the hold's time to live after its slot
-- ARGV[9]  early_us: integer µs >= 0; a held slot is handed over when it is
--          at most max(max_wait_us, early_us) away (a holder that comes back
--          early on purpose sleeps the rest rather than leaving again)
-- Reply    {status, wait_us, from, n, slot_us, slot_frac, seq}
--            status    1 handed over (use the slot), 2 held, 0 refused
--            wait_us   integer µs from now to the slot, rounded toward zero
--                      when negative (a redeemed hold that is a little late)
--                      and up otherwise
--            from      1 the slot had been held for this holder, 2 a stale
--                      hold was dropped and the slot is fresh, 0 fresh
--            n         the slot's permits
--            slot_us, slot_frac, seq  the slot and the reservation's
--                      number, as reserve.lua returns them (absent when
--                      refused)

local n = n_arg(5)
if not n then
  return redis.error_reply('ERR pacer: n must be between 1 and burst')
end
local max_wait_us = tonumber(ARGV[6])
local may_hold = ARGV[7] == '1'
local stale_us = tonumber(ARGV[8])
local early_us = tonumber(ARGV[9])
if not max_wait_us or max_wait_us < 0 or not stale_us or stale_us < 0 or not early_us or early_us < 0 then
  return redis.error_reply('ERR pacer: max_wait_us, stale_us and early_us must be non-negative')
end
local hold_key = KEYS[2]

-- ceil_wait rounds a relative time to integer µs, never early.
local function ceil_wait(r)
  if r < 0 then
    return -math.floor(-r)
  end
  return math.ceil(r)
end

-- HMGET raises WRONGTYPE before anything is written if the key is not a hash.
local h = redis.call('HMGET', hold_key, 'slot', 'slotf', 'n', 'seq')
local from = 0
if h[1] then
  local s = rel(h[1], h[2])
  local hn = tonumber(h[3]) or n
  if s >= -stale_us then
    local wait_us = ceil_wait(s)
    if wait_us <= max_wait_us or wait_us <= early_us then
      redis.call('DEL', hold_key)
      return {1, wait_us, 1, hn, h[1], h[2], tonumber(h[4]) or 0}
    end
    if may_hold then
      return {2, wait_us, 1, hn, h[1], h[2], tonumber(h[4]) or 0}
    end
    return {0, wait_us, 1, hn}
  end
  redis.call('DEL', hold_key)
  from = 2
end

local new_z, slot = take(z, n)
if not new_z then
  return redis.error_reply('ERR pacer: queue too long')
end
local wait_us = math.ceil(slot)
if wait_us > max_wait_us and not may_hold then
  return {0, wait_us, from, n}
end

local seq = commit(new_z, slot, 1)
local slot_us, slot_frac = abs(slot)
if wait_us <= max_wait_us then
  return {1, wait_us, from, n, slot_us, slot_frac, seq}
end
redis.call('HSET', hold_key, 'slot', slot_us, 'slotf', slot_frac, 'n', string.format('%d', n), 'seq', string.format('%d', seq))
redis.call('PEXPIRE', hold_key, string.format('%d', math.ceil((slot + stale_us) / 1000) + 1))
return {2, wait_us, from, n, slot_us, slot_frac, seq}
