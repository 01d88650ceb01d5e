-- reserve.lua: reserve n permits, first come first served (x/time/rate ReserveN).
--
-- KEYS[1]  the bucket (see bucket.lua)
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  n, permits to reserve, integer 1..burst
-- ARGV[6]  max_wait_us: integer µs; if the wait would be longer, nothing is
--          written. -1 means no maximum.
-- Reply    granted: {1, wait_us, slot_us, slot_frac, seq}
--            wait_us   integer µs from now to the slot, rounded up
--            slot_us   the slot, integer Unix µs (string)
--            slot_frac its fraction of a µs (string)
--            seq       the reservation's number on this key (integer); with
--                      the slot, it identifies the reservation to cancel.lua
--          refused:  {0, wait_us}, the wait it would have needed

local n = n_arg(5)
if not n then
  return redis.error_reply('ERR pacer: n must be between 1 and burst')
end
local max_wait_us = tonumber(ARGV[6])

local new_z, slot = take(z, n)
if not new_z then
  return redis.error_reply('ERR pacer: queue too long')
end
local wait_us = math.ceil(slot)
if max_wait_us >= 0 and wait_us > max_wait_us then
  return {0, wait_us}
end

local seq = commit(new_z, slot, 1)
local slot_us, slot_frac = abs(slot)
return {1, wait_us, slot_us, slot_frac, seq}
