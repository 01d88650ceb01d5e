-- heartbeat.lua: record a limiter as live and count the live ones. Each
-- Limiter runs it every few seconds; while Redis is down, a Limiter divides
-- each key's rate by the last count it learned.
--
-- KEYS[1]  the fleet, a sorted set: member = limiter id, score = Unix ms of
--          its last heartbeat (Redis server time)
-- ARGV[1]  this limiter's id
-- ARGV[2]  ttl_ms: a limiter not heard from for this long is not counted
-- Reply    the number of live limiters, this one included (integer >= 1)

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl_ms = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%d', now_ms), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now_ms - ttl_ms))
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl_ms))
return redis.call('ZCARD', KEYS[1])
