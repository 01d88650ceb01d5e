-- naive.lua: the script phase's reference (issue 26, item 3), a plain
-- one-script token bucket written the way a limiter that does not count its
-- cost would be: HMGET, floats, HSET, PEXPIRE, three float formats. It is
-- measured beside reserve.lua in the same run; pacer's script must cost
-- Redis no more than three quarters of it. Not pacer's semantics (it
-- rejects instead of reserving): only its cost matters.
--
-- KEYS[1]  the bucket, a hash: tokens (a decimal), ts (Unix µs)
-- ARGV[1]  rate, permits per second (decimal > 0)
-- ARGV[2]  burst, permits (decimal >= 1)
-- ARGV[3]  cost, permits (decimal >= 0)
-- Reply    {allowed (1 or 0), wait in µs until it would be allowed (a
--          decimal string), tokens left (a decimal string)}
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tm = redis.call('TIME')
local now = tm[1] * 1000000 + tm[2]
local v = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(v[1]), tonumber(v[2])
if not tokens or not ts then
  tokens, ts = burst, now
end
local elapsed = now - ts
if elapsed < 0 then
  elapsed = 0
end
tokens = math.min(burst, tokens + elapsed * rate / 1000000)
local allowed, wait = 0, 0
if tokens >= cost then
  allowed, tokens = 1, tokens - cost
else
  wait = (cost - tokens) * 1000000 / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'ts', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, string.format('%.3f', wait), string.format('%.6f', tokens)}
