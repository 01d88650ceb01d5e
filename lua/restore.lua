-- restore.lua: a Limiter back from an outage puts back a key's stored
-- limit that Redis lost (restarted empty, flushed), as the Limiter last
-- saw it. Only when nothing of the key is left: no state, no stored limit
-- and no history (every set and unset writes the history, so an operator's
-- unset is never undone). It does not use core.lua.
--
-- KEYS[1]  the key's state (core.lua's KEYS[1])
-- KEYS[2]  the stored limit (core.lua's KEYS[2])
-- KEYS[3]  the history (admin.lua's KEYS[4])
-- ARGV[1]  the stored limit to put back, as KEYS[2] held it
-- ARGV[2]  who (the Limiter's id), ARGV[3] how many history entries to keep
-- Reply    1 if it was put back, 0 if anything of the key was left
--
-- It reads with GET alone (a Limiter's ACL has no EXISTS or TYPE): GET on
-- a key of another type fails, which means it exists.

if ARGV[1] == '' or not string.match(ARGV[1], '^%a+ %d+ ') then
  return redis.error_reply('PACER_ARG want the stored limit to put back')
end
for i = 1, 3 do
  local v = redis.pcall('GET', KEYS[i])
  if v then
    return 0
  end
end
redis.call('SET', KEYS[2], ARGV[1])
local t = redis.call('TIME')
-- The history entry is best effort: a Limiter's ACL may not allow LPUSH.
redis.pcall('LPUSH', KEYS[3], cjson.encode({
  at_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
  op = 'restore',
  who = ARGV[2],
  reason = 'Redis had lost it (restarted empty?); put back as this Limiter last saw it',
  before = '',
  after = ARGV[1]
}))
redis.pcall('LTRIM', KEYS[3], 0, (tonumber(ARGV[3]) or 50) - 1)
return 1
