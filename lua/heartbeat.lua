-- heartbeat.lua: record a Limiter as live, with its mode, and count the
-- fleet: the Limiters heard from lately, and those gone silent that may still
-- be pacing locally on their share. Each Limiter runs it every few seconds;
-- its count sets the share of each key's rate it takes from Redis, and the
-- share it paces at locally when Redis is unavailable. It does not use
-- core.lua.
--
-- KEYS[1]  the fleet, a sorted set: member = Limiter id, score = Unix ms of
--          its last heartbeat (Redis server time)
-- KEYS[2]  the fleet's details, a hash: Limiter id -> "<mode> <since_ms>"
--          (mode "redis" or "local": how it paces; since_ms: Unix ms, the
--          Limiter's clock, when that mode began)
-- ARGV[1]  this Limiter's id
-- ARGV[2]  "redis", "local", or "leave" (Close: remove it; reply {now_ms})
-- ARGV[3]  since_ms (integer)
-- ARGV[4]  live_ms: a Limiter heard from within this is live
-- ARGV[5]  hold_ms: a Limiter silent longer than live_ms but heard from
--          within hold_ms is counted as held (it may be pacing locally);
--          one silent longer is forgotten
-- ARGV[6...]  optional pairs: a key, and "<Unix ms> <policy>", the policy
--          this Limiter's code passes for it (reserve's stored text form),
--          recorded in KEYS[3] for operators (reserve.Admin.Status)
-- KEYS[3]  the policies reported, a hash: key -> "<Unix ms> <policy>";
--          it lives as long as the fleet
-- Reply    {now_ms, live, held}: live includes this Limiter. Another
--          Limiter heard from within live_ms whose mode is "local" counts
--          as held: it reaches the fleet's set but not its keys (a Redis
--          Cluster with the key's shard failing over) and paces locally on
--          its share, which the others must leave it.

local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local id, mode = ARGV[1], ARGV[2]
if mode == 'leave' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  return {now_ms}
end
local live_ms, hold_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
if not live_ms or not hold_ms or live_ms <= 0 or hold_ms < live_ms or (mode ~= 'redis' and mode ~= 'local') then
  return redis.error_reply('PACER_ARG want id, mode, since_ms, live_ms <= hold_ms')
end
redis.call('ZADD', KEYS[1], now_ms, id)
redis.call('HSET', KEYS[2], id, mode .. ' ' .. ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now_ms - hold_ms))
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now_ms - hold_ms))
  redis.call('HDEL', KEYS[2], unpack(gone))
end
redis.call('PEXPIRE', KEYS[1], hold_ms)
redis.call('PEXPIRE', KEYS[2], hold_ms)
if KEYS[3] then
  if #ARGV > 5 then
    redis.call('HSET', KEYS[3], unpack(ARGV, 6))
  end
  redis.call('PEXPIRE', KEYS[3], hold_ms)
end
local heard = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%d', now_ms - live_ms), '+inf')
local live = #heard
if live > 1 then
  local modes = redis.call('HMGET', KEYS[2], unpack(heard))
  for i = 1, #heard do
    local m = modes[i]
    if heard[i] ~= id and m and string.sub(m, 1, 6) == 'local ' then
      live = live - 1
    end
  end
end
local all = redis.call('ZCARD', KEYS[1])
return {now_ms, live, all - live}
