-- peek.lua: read a bucket without changing it: the wait n permits would have
-- now, and the balance.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  n, permits, integer 1..burst
-- Reply    {wait_us, tokens}
--            wait_us  integer µs, rounded up; 0 when n permits are available
--            tokens   the balance now as a decimal string, at most burst,
--                     negative while reservations are queued

local n = n_arg(5)
if not n then
  return redis.error_reply('ERR pacer: n must be between 1 and burst')
end
local wait = z + n * us_per_permit
if wait < 0 then
  wait = 0
end
return {math.ceil(wait), string.format('%.17g', -z / us_per_permit)}
