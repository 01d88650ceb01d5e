-- adaptive.lua: a rate the fleet learns for a key whose limit the provider
-- does not publish (reserve.Adaptive). It does not use core.lua.
--
-- Until the first cut the rate doubles every `double` ms from `start` (slow
-- start, as TCP's). A cut (a refusal) takes the rate w at that moment, sets
-- the curve's plateau wmax = plateau * w (just below the rate refused) and
-- leaves r0 = decrease * w; the rate then follows CUBIC's curve,
-- rate(t) = wmax + (wmax - r0) * ((t - K) / K)^3: it climbs back fast,
-- levels off near wmax around t = K (`recover` ms), and probes beyond it
-- slowly, then faster. A cut below the last wmax (the limit fell) takes
-- wmax = w * min(plateau, (1 + decrease) / 2) (CUBIC's fast convergence).
-- The curve is computed on read. Its growth beyond wmax (beyond start in
-- slow start) is also held to twice the demand (RFC 7661's rule for an
-- application-limited flow): a key
-- the fleet calls less often than its rate allows learns nothing about the
-- limit above that, so its rate must not grow there unseen and then hit the
-- provider in one step when the demand comes back. Each read counts one
-- call of demand, in whole seconds; beyond wmax, the rate is at most
-- max(wmax, 2 x the calls of the last whole second).
-- A cut counts once per episode: refusals that arrive within `episode` ms
-- of a cut come from calls sent before it and change nothing, unless the
-- refused call was paced (ARGV[10]) below the midpoint of that cut,
-- (r0 + r0 / decrease) / 2: such a call was sent at the rate the cut left,
-- which is still too high (the limit fell further than the cut), and it
-- cuts again at once. The rate stays within [min, max].
--
-- KEYS[1]  the record, a string: "<r0> <wmax> <cut (or start), Unix ms>
--          <episode end, Unix ms> <cuts so far> <second of the demand
--          count, Unix s> <reads in it> <reads in the second before>";
--          absent: the rate is `start`, from now
-- ARGV[1]  "read" (counts one call of demand), "peek" (reads, writes
--          nothing) or "cut"
-- ARGV[2..4]  start, min, max (units/s, decimal, 0 < min <= start <= max)
-- ARGV[5]  recover: K, ms (integer > 0)
-- ARGV[6]  decrease (0 < decrease < 1)
-- ARGV[7]  episode, ms (integer >= 0)
-- ARGV[8]  how long the record outlives its last read or cut, ms (integer > 0)
-- ARGV[9]  double: slow start's doubling time, ms (integer > 0)
-- ARGV[10] paced: the rate the refused call was reserved at (decimal >= 0;
--          0: unknown). A cut starts from the lower of it and the rate now:
--          a call refused after a wait was sent at the rate of its
--          reservation, and the rate may have grown since.
-- ARGV[11] demand: the calls a read counts (integer >= 1; a process that
--          reads once per refresh counts the calls it served meanwhile);
--          absent: 1. Ignored by peek and cut.
-- ARGV[12] plateau: where the curve levels off after a cut, a fraction of
--          the rate cut from (decrease < plateau <= 1); absent: 1
--          (CUBIC's).
-- Reply    {rate as a decimal string, 1 if this call cut else 0, cuts}
-- Errors   PACER_ARG, PACER_WRONGTYPE

local op = ARGV[1]
local start, min, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local recover, decrease = tonumber(ARGV[5]), tonumber(ARGV[6])
local episode, keep, double = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local paced = tonumber(ARGV[10])
local demand = tonumber(ARGV[11] or '1')
local plateau = tonumber(ARGV[12] or '1')
if (op ~= 'read' and op ~= 'peek' and op ~= 'cut') or not start or not min or not max or not recover or not decrease
    or not episode or not keep or not double or not paced or paced < 0 or not demand or demand < 0 or not plateau or not (plateau > decrease and plateau <= 1) or double <= 0 or recover <= 0 or min <= 0
    or start < min or max < start or decrease <= 0 or decrease >= 1 or episode < 0 or keep <= 0 then
  return redis.error_reply('PACER_ARG bad adaptive arguments')
end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)

local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the adaptive rate key holds another type')
end
local sec = math.floor(now / 1000)
local r0, wmax, cut_at, ends, cuts, win, cnt, prev = start, start, now, 0, 0, sec, 0, 0
if raw then
  local a, b, c, d, e, f, g, h = string.match(raw, '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  r0, wmax, cut_at, ends, cuts = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e)
  win, cnt, prev = tonumber(f), tonumber(g), tonumber(h)
  if not r0 or not wmax or not cut_at or not ends or not cuts or not win or not cnt or not prev then
    r0, wmax, cut_at, ends, cuts, win, cnt, prev = start, start, now, 0, 0, sec, 0, 0 -- unreadable: start over
    raw = nil
  end
end
-- (One assignment per statement: gopher-lua, the embedded demo's Lua,
-- evaluates `a, b = b, a` in order, not as Lua does.)
if sec == win + 1 then
  prev = cnt
  cnt = 0
  win = sec
elseif sec ~= win then
  prev = 0 -- idle for a second or more (or a clock step)
  cnt = 0
  win = sec
end
if op == 'read' then
  cnt = cnt + math.max(1, math.floor(demand))
end
local t = math.max(0, now - cut_at)
local rate
if cuts == 0 then
  rate = r0 * 2 ^ math.min(64, t / double)
else
  local x = (t - recover) / recover
  rate = wmax + (wmax - r0) * x * x * x
end
if rate > wmax then
  -- Beyond wmax (Start, in slow start) the rate is held to twice the demand.
  rate = math.min(rate, math.max(wmax, 2 * prev))
end
if rate > max then
  rate = max
end
if rate < min then
  rate = min
end

-- A refusal within the episode of a call paced below the midpoint of the
-- last cut (between the rate cut from, r0 / decrease, and r0) is no echo
-- of the calls sent before that cut: it was sent at the rate the cut
-- left, and that rate is still too high. It cuts at once.
local fresh = now >= ends or (cuts > 0 and paced > 0 and paced < r0 * (1 + decrease) / (2 * decrease))
local cut = 0
if op == 'cut' and fresh then
  local w = rate
  if paced > 0 and paced < w then
    w = paced
  end
  if cuts > 0 and w < wmax then
    wmax = w * math.min(plateau, (1 + decrease) / 2)
  else
    wmax = w * plateau
  end
  r0 = math.max(min, w * decrease)
  rate = r0
  cuts = cuts + 1
  cut = 1
  redis.call('SET', KEYS[1], string.format('%.17g %.17g %d %d %d %d %d %d', r0, wmax, now, now + episode, cuts, win, cnt, prev),
    'PX', keep)
elseif not raw and op == 'read' then
  -- The first read pins the start of the growth.
  redis.call('SET', KEYS[1], string.format('%.17g %.17g %d 0 0 %d %d %d', r0, wmax, now, win, cnt, prev), 'PX', keep)
elseif op == 'read' then
  redis.call('SET', KEYS[1], string.format('%.17g %.17g %d %d %d %d %d %d', r0, wmax, cut_at, ends, cuts, win, cnt, prev),
    'PX', keep)
end
return {string.format('%.17g', rate), cut, cuts}
