-- adaptive.lua: a rate the fleet learns for a key whose limit the provider
-- does not publish (reserve.Adaptive). It does not use core.lua.
--
-- The rate grows by `increase` units/s every second after its last cut
-- (additive increase, computed on read: no write while it grows) up to
-- `max`, and a cut multiplies it by `decrease` (multiplicative decrease),
-- at most once per episode: 429s that arrive within `episode` of a cut were
-- caused by calls sent before it, and change nothing.
--
-- KEYS[1]  the record, a string: "<rate at the last cut> <cut, Unix ms>
--          <episode end, Unix ms> <cuts so far>"; absent: the rate is
--          `start`, from now
-- ARGV[1]  "read" or "cut"
-- ARGV[2..6]  start, min, max (units/s, decimal, 0 < min <= start <= max),
--          increase (units/s per second, decimal >= 0), decrease
--          (0 < decrease < 1)
-- ARGV[7]  episode, ms (integer >= 0)
-- ARGV[8]  how long the record outlives its last cut, ms (integer > 0)
-- Reply    {rate as a decimal string, 1 if this call cut else 0, cuts}
-- Errors   PACER_ARG, PACER_WRONGTYPE

local op = ARGV[1]
local start, min, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local increase, decrease = tonumber(ARGV[5]), tonumber(ARGV[6])
local episode, keep = tonumber(ARGV[7]), tonumber(ARGV[8])
if (op ~= 'read' and op ~= 'cut') or not start or not min or not max or not increase or not decrease
    or not episode or not keep or min <= 0 or start < min or max < start or increase < 0
    or decrease <= 0 or decrease >= 1 or episode < 0 or keep <= 0 then
  return redis.error_reply('PACER_ARG bad adaptive arguments')
end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the adaptive rate key holds another type')
end
local base, cut_at, ends, cuts = start, now, 0, 0
if raw then
  local a, b, c, d = string.match(raw, '^(%S+) (%S+) (%S+) (%S+)$')
  base, cut_at, ends, cuts = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
  if not base or not cut_at or not ends or not cuts then
    base, cut_at, ends, cuts = start, now, 0, 0 -- unreadable: start over
    raw = nil
  end
end
local rate = base + increase * math.max(0, now - cut_at) / 1000
if rate > max then
  rate = max
end
if rate < min then
  rate = min
end

local cut = 0
if op == 'cut' and now >= ends then
  rate = math.max(min, rate * decrease)
  cuts = cuts + 1
  cut = 1
  redis.call('SET', KEYS[1], string.format('%.17g %d %d %d', rate, now, now + episode, cuts), 'PX', keep)
elseif not raw then
  -- The first read pins the start of the growth.
  redis.call('SET', KEYS[1], string.format('%.17g %d 0 0', rate, now), 'PX', keep)
end
return {string.format('%.17g', rate), cut, cuts}
