-- quota.lua: the fleet's count of a provider's quota of calls (package
-- pacehttp). It does not use core.lua.
--
-- A provider that reports its quota (x-ratelimit-remaining and its reset,
-- RateLimit: ..., ...) says, in each answer, how many calls are left. The
-- calls the fleet took since then, not answered yet, are not in that count:
-- what the fleet may still send is the count less the calls in flight. Each
-- call takes one (`take`) before it is sent, and reports its answer
-- (`answer`), or that it was not sent (`drop`).
--
-- Two kinds of quota:
--   - a fixed window (GitHub, the IETF drafts): the calls left are spread
--     evenly over the time until the window ends at the earliest, the
--     first tenth of them at once, so that the window's last call is sent
--     before its end. When nothing is left, callers wait for the end at the
--     latest. After it, one call
--     (the probe) goes first, alone, and its answer tells the new window:
--     a provider's reset rounded to a second may end the window early or
--     late, and only its answer says which.
--   - a refilling bucket: the calls left now, then the refill, in order,
--     each call waiting for its own.
-- A quota whose reset is the time until it is whole again (OpenAI's,
-- Anthropic's: ARGV[7] 1) may be either: a bucket refilled continuously
-- (full again at the reset) or a fixed window (whole again at its end).
-- The answers tell them apart. A bucket refills at one rate, so every
-- answer's used calls over its reset, (limit - left) / reset, is that rate
-- up to the rounding: with left rounded down and the reset within unc2
-- (ARGV[10]) of the truth, the rate lies in
-- [(limit - left - 1) / (reset + unc2), (limit - left) / (reset - unc2)].
-- In a window the same ratio grows as the window runs out (more used, less
-- time left), from 0 to the whole quota over what is left of the window:
-- two answers of one window with different counts used, further apart in
-- time than the rounding, have disjoint ranges. An answer whose reset is
-- below twice its rounding tells nothing (its range is too wide). The
-- count keeps the ranges' intersection, whatever order the answers come
-- in: once it is empty, the quota is a window, for good; once at least 8
-- answers with at least two different counts used share a range of rates
-- above 0 and no wider than twice its least, it is a bucket, paced at the
-- least rate the answers allow (never above its true rate),
-- until an answer no bucket at that rate sends makes it a window. Until
-- then it is counted as a window: the window's reading never sends more
-- than either kind allows (a bucket holds at least what it said was left,
-- less what was spent since), it only uses less of a bucket.
-- Each call counted is one less to take, when it is taken. With a window's
-- quota known (its limit), the calls left are the quota less the window's
-- takes and less what others spent, which every answer bounds from below:
-- the calls the provider counted beyond all the takes so far. Without it,
-- an answer can only lower the count (to the calls it says are left, less
-- those in flight), never raise it: an answer read late may not count a
-- call that came after it and was answered first, and a call counted but
-- not answered yet is taken off twice. So the fleet may use a little less
-- than the quota, never more. A new window, or a bucket's first count, sets
-- it. A take of the window before that is answered once the new window is
-- open may have reached the provider in it: it is charged to the new
-- window (c), whichever the provider counted it in (less, never more).
-- After a window's end, only the probe's answer (or a later take's) opens
-- the next window: an answer of the window that ended, read late (its
-- script queued behind a paused or slow Redis), would place the next end
-- its reset after the script ran, later than the provider's. It counts
-- nothing.
-- The probe's answer (or a later take's) that counts nothing means the
-- provider stopped counting: the key goes unpaced.
--
-- KEYS[1]  the count, a hash:
--            s  takes so far (each take's number)
--            w  the first take of the current window (its probe)
--            e  fixed window: its end, Unix ms (0: none known), at the
--               latest: the earliest end an answer gave
--            o  fixed window: its end at the earliest (an answer's end less
--               its uncertainty: a reset in whole seconds, rounded up, may
--               be up to a second late)
--            b  calls left to take: before e, or at time t (bucket)
--            n  fixed window: where the spread stands, Unix ms
--            p  a probe is out until then, Unix ms (0: none)
--            r  the calls' round trip, ms (moving average)
--            l, f, t  bucket: its limit, its refill per ms (0: a fixed
--                     window), and when b was its level, Unix ms
--            x  fixed window of a known quota: the calls others spent in it,
--               at the least (see below)
--            c  fixed window of a known quota: the takes of the windows
--               before answered since it opened (see below)
--            d  fixed window: its takes dropped (not sent)
--            k  a quota whose reset is when it is whole again: 0 its kind
--               not known (counted as a window), 1 a window, 2 a bucket
--            q, h  the refill rates (per ms) its answers allow: at least q,
--               at most h (-1: no bound yet)
--            m  its answers read (that tell something); y, z  the fewest
--               and most calls used they said
-- KEYS[2]  the takes in flight, a sorted set: member the take's number,
--          score when it lapses unanswered (Unix ms)
-- ARGV[1]  "take", "answer" or "drop"
-- ARGV[2]  keep: how long the keys outlive the window's end and the last
--          call, ms (integer > 0)
-- take:    ARGV[3] lapse: how long after its slot a take unanswered stops
--          counting as in flight, ms (integer > 0)
--          Reply {wait ms (integer >= 0), take number, known}: sleep wait
--          and send; with number 0, nothing was taken: take again after
--          wait; with known 0 (and wait 0), no count is known: send, and
--          take no more until an answer counts.
-- answer:  ARGV[3] the take answered (0: a call not taken), ARGV[4] the
--          calls left (-1: the answer counts nothing), ARGV[5] reset ms,
--          ARGV[6] limit (0: unknown), ARGV[7] 1 for a quota whose reset
--          is when it is whole again (a bucket or a window, told apart as
--          above), ARGV[8] the call's round trip, ms, ARGV[9] how much
--          earlier the reset may be than it says, ms, ARGV[10] (optional,
--          default ARGV[9]) how far the reset may be from the time until
--          the quota is whole again, as of when left was counted, ms
-- drop:    ARGV[3] the take not sent
-- Reply of answer: 2 when the quota is read as a bucket, else 1.
-- Reply of drop: 1
-- Errors   PACER_ARG, PACER_WRONGTYPE

local op = ARGV[1]
local keep = tonumber(ARGV[2])
if (op ~= 'take' and op ~= 'answer' and op ~= 'drop') or not keep or keep <= 0 then
  return redis.error_reply('PACER_ARG bad quota arguments')
end

local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + tonumber(tm[2]) / 1000

local raw = redis.pcall('HMGET', KEYS[1], 'o', 's', 'w', 'e', 'b', 'n', 'p', 'r', 'l', 'f', 't', 'x', 'd', 'k', 'q', 'h', 'm', 'y', 'z', 'c')
if raw.err then
  return redis.error_reply('PACER_WRONGTYPE the quota key holds another type')
end
local zt = redis.pcall('TYPE', KEYS[2])
zt = zt.ok or zt
if zt ~= 'zset' and zt ~= 'none' then
  return redis.error_reply('PACER_WRONGTYPE the quota key holds another type')
end
local o = tonumber(raw[1]) or 0
local s = tonumber(raw[2]) or 0
local w = tonumber(raw[3]) or 0
local e = tonumber(raw[4]) or 0
local b = tonumber(raw[5]) or 0
local n = tonumber(raw[6]) or 0
local p = tonumber(raw[7]) or 0
local r = tonumber(raw[8]) or 0
local l = tonumber(raw[9]) or 0
local f = tonumber(raw[10]) or 0
local t = tonumber(raw[11]) or 0
local x = tonumber(raw[12]) or 0
local d = tonumber(raw[13]) or 0
local k = tonumber(raw[14]) or 0
local q = tonumber(raw[15]) or 0
local h = tonumber(raw[16]) or -1
local m = tonumber(raw[17]) or 0
local y = tonumber(raw[18]) or 0
local z = tonumber(raw[19]) or 0
local c = tonumber(raw[20]) or 0

-- A full Redis (maxmemory, noeviction) refuses a script's first write
-- that may add memory, but lets one that has written already go on, and
-- the removal below comes before the count's write: ask first. ZADD XX GT
-- -inf changes no member of KEYS[2], so with room it does nothing; a full
-- Redis refuses it, and the call ends with OOM, nothing written
-- (docs/protocol.md, "A full Redis").
redis.call('ZADD', KEYS[2], 'XX', 'GT', '-inf', 'full')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

local function save()
  redis.call('HSET', KEYS[1], 'o', string.format('%.3f', o), 's', s, 'w', w, 'e', string.format('%.3f', e), 'b', string.format('%.17g', b),
    'n', string.format('%.3f', n), 'p', string.format('%.3f', p), 'r', string.format('%.3f', r), 'l', l,
    'f', string.format('%.17g', f), 't', string.format('%.3f', t), 'x', x, 'd', d,
    'k', k, 'q', string.format('%.17g', q), 'h', string.format('%.17g', h), 'm', m, 'y', y, 'z', z, 'c', c)
  local ttl = math.floor(math.max(keep, e - now + keep))
  redis.call('PEXPIRE', KEYS[1], ttl)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end

if op == 'take' then
  local lapse = tonumber(ARGV[3])
  if not lapse or lapse <= 0 then
    return redis.error_reply('PACER_ARG bad quota lapse')
  end
  lapse = math.max(lapse, 4 * r)
  if e == 0 and f == 0 then
    return {0, 0, 0} -- no count known: nothing to take
  end
  local wait = 0
  if f > 0 then
    -- A refilling bucket: this call's turn is when its unit has refilled.
    local level = math.min(l, b + f * (now - t))
    level = level - 1
    b = level
    t = now
    if level < 0 then
      wait = -level / f
    end
  elseif e > now then
    if b < 1 then
      return {math.ceil(e - now), 0, 1}
    end
    -- Spread what is left over the time left, a tenth of it at once; no
    -- later than the earliest end, which a later answer may have brought
    -- before where the spread stood.
    local base = math.max(math.min(n, o), now)
    local gap = math.max(0, o - base) / b
    local k = math.max(1, math.ceil(b / 10))
    local slot = math.max(now, base - (k - 1) * gap)
    n = base + gap
    b = b - 1
    wait = slot - now
  elseif e > 0 then
    -- The window ended: one probe, then the new window its answer tells.
    if p > now then
      return {math.ceil(math.min(p - now, math.max(5, r / 4))), 0, 1}
    end
    p = now + math.max(250, 4 * r)
    w = s + 1
    b = 0
    n = now
  end
  s = s + 1
  redis.call('ZADD', KEYS[2], now + wait + lapse, s)
  save()
  return {math.ceil(wait), s, 1}
end

local id = tonumber(ARGV[3])
if not id or id < 0 or id ~= math.floor(id) then
  return redis.error_reply('PACER_ARG bad quota take number')
end
if id > 0 then
  redis.call('ZREM', KEYS[2], id)
end

if op == 'drop' then
  if p > 0 and id == w then
    p = 0 -- the probe was not sent: the next take probes
  end
  if f == 0 and e > 0 and id >= w then
    d = d + 1
    b = b + 1
  elseif f > 0 and id > 0 then
    b = b + 1 -- a bucket: the unit it took is back
  end
  save()
  return 1
end

local left, reset, limit, refill, rtt = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local unc = tonumber(ARGV[9])
local unc2 = unc
if ARGV[10] ~= nil then
  unc2 = tonumber(ARGV[10])
end
if not left or not reset or not limit or not rtt or not unc or not unc2 or reset < 0 or limit < 0 or rtt < 0 or unc < 0
    or unc2 < 0 or (refill ~= '0' and refill ~= '1') then
  return redis.error_reply('PACER_ARG bad quota answer')
end
-- A quota whose reset is when it is whole again: the refill rates this
-- answer allows, if a bucket (see the top).
local used = limit - left
if refill == '1' and limit > 0 and left >= 0 and used >= 0 and k ~= 1 and reset > 0 and reset >= 2 * unc2 then
  if used > 1 then
    q = math.max(q, (used - 1) / (reset + unc2))
  end
  local hi = used / (reset - unc2)
  if h < 0 or hi < h then
    h = hi
  end
  if m == 0 then
    y, z = used, used
  else
    y, z = math.min(y, used), math.max(z, used)
  end
  m = m + 1
  if h >= 0 and q > h then
    k = 1 -- no one rate: a window, for good
  elseif k == 0 and m >= 8 and q > 0 and h >= 0 and h <= 2 * q and z > y then
    k = 2
  end
end
local kind = 1
if k == 2 then
  kind = 2
end
if rtt > 0 then
  if r == 0 then
    r = rtt
  else
    r = 0.8 * r + 0.2 * rtt
  end
end
if f == 0 and id > 0 and id < w and k ~= 2 then
  -- An answer of a take from before the window. Once the window is open,
  -- its call may have reached the provider in it: charged to it (c).
  if e > now then
    c = c + 1
  end
  save()
  return kind
end
if f == 0 and k ~= 2 and e > 0 and e <= now and not (p > 0 and id >= w) then
  save() -- the window ended, and this is not the probe's answer: read late
  return kind
end
if p > 0 then
  p = 0 -- the probe's answer (or a later one): the window is known
end
if left < 0 then
  if f == 0 and e <= now then
    e = 0 -- no count after the window: the provider stopped counting
  end
  save()
  return kind
end

local inflight = redis.call('ZCARD', KEYS[2])
local avail = left - inflight
if refill == '1' and k == 2 then
  -- A bucket: its level is what was left, refilled since at the least
  -- rate the answers allow, and no more than this answer says is left.
  if f > 0 then
    b = math.min(math.min(l, b + f * (now - t)), avail)
  else
    b = avail
  end
  f = q
  l = limit
  t = now
  e = 0
else
  if f > 0 then
    e = 0 -- a bucket no more: a new window
  end
  f = 0
  if e <= now then
    -- A new window.
    e = now + reset
    o = e - unc
    n = now
    x = 0
    d = 0
    c = 0
    if id > 0 then
      w = math.max(w, id)
    else
      w = s + 1
    end
    b = avail
  else
    e = math.min(e, now + reset)
    o = math.min(e, math.max(o, now + reset - unc))
    b = math.min(b, avail)
  end
  if limit > 0 then
    -- The quota known, the calls left are the quota less the window's
    -- takes (all of them: counted by the provider or about to be) and what
    -- others spent. Those are at least what the provider counted beyond
    -- every take so far. This needs no answer to be read in order.
    local taken = s - w + 1 - d
    x = math.max(x, limit - left - taken)
    -- And less the takes of the window before still in flight: sent
    -- before the end this count knew, which is the provider's to a second
    -- at best, they may reach it in its new window after this answer was
    -- counted, and are in neither figure (the combination runner's seed
    -- 45: 27 calls in a window of 24). Each leaves the set when answered,
    -- and is then charged to the window in c.
    local before = 0
    for _, tk in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
      local v = tonumber(tk)
      if v and v < w then
        before = before + 1
      end
    end
    -- And less the older takes answered since the window opened (c):
    -- x counts them too once no take of the window is on its way, but
    -- until then the takes on their way hide them (a call or two of the
    -- window may go unused, never one too many).
    b = limit - taken - c - x - before
  end
end
save()
return kind
