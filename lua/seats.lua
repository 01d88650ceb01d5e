-- seats.lua: a key's in-flight band, "at most N units open at once",
-- fleet-wide. A call takes its seats before its slot and gives them back
-- when it ends; a call that finds no seat free waits in the key's queue,
-- in order, and the call that frees a seat hands it to the queue's head in
-- the same script (a hand-off), announced on the fleet's events channel,
-- "<prefix>{limiters}:events", the prefix read off KEYS[1] as core.lua's
-- publish reads it. The channel is no key of the call: on a Redis Cluster
-- a script's keys must share one hash slot, and the channel's tag is the
-- fleet's, not the key's (as KEYS[3] once, every call failed CROSSSLOT).
-- Seats are held by the fleet's members (heartbeat.lua's ranks), not by a
-- timeout: the seats of a member the fleet no longer lists are dropped by
-- the next call on the key, and a member held by the fleet (silent, or
-- pacing locally on its share) keeps them, but is handed none until it is
-- back: the first call waiting whose holder is not held is the queue's
-- head for hand-offs and for the calls that come. It does not use
-- core.lua.
--
-- KEYS[1]  the seats, a hash, small (a field per holder): every call reads
--          it whole
--            "r:<holder>" -> "<limiter id> <Unix ms> <seats>"  who holds
--                          the holder's place, when it last called (moved
--                          later by the key's calls stopping over I, below),
--                          and the seats its calls hold
--            "c"          -> the queue's counter
--            "u"          -> the latest the server can have started (Unix
--                          ms, from INFO's uptime when the hash was made)
--            "f"          -> "<view> <place>": every call waiting at or
--                          before that place (the queue's counter) is of a
--                          holder held in that view (mode, the caller's
--                          holder if held itself, else "-", held ranks),
--                          or counts for nothing: where a call with the
--                          same view starts looking for the queue's head
--                          (front). Optional.
--          A holder is a member's rank, or "i<limiter id>" for a Limiter
--          that has no rank yet. A ticket is "<limiter id>.<n>".
-- KEYS[2]  the queue, a sorted set: ticket -> its place (the counter)
-- KEYS[3]  an operator's N (admin.Client.SetInFlight, pacer set
--          --in-flight): a string "1" to "1000000", without expiry, so that
--          it outlives the seats of a key gone idle; absent (or not one):
--          the caller's ARGV[5]. The local store has none: a process pacing
--          locally uses the N its last reply on Redis gave (ARGV[5]).
-- KEYS[4]  the tickets, a hash, read by the fields a call needs (whole only by
--          renew): "s:<ticket>" -> "<holder> <cost>", seats a call holds;
--          "w:<ticket>" -> "<holder> <cost>", a call waiting. A ticket
--          whose holder is gone (or whose holder's place another Limiter
--          holds now) counts for nothing, and is dropped when met. read
--          does not use it.
-- ARGV[1]  the operation: acquire, release, cancel, renew or read
-- ARGV[2]  "<limiter id> <holder> <n> <mode>": n the fleet's size (0:
--          unknown); mode "r" on Redis, "x" on Redis right after it lost
--          the fleet (no seat is granted: members not back yet may hold
--          seats Redis no longer records; they renew them at their next
--          heartbeat), "l" the local fallback's store (its own seats only,
--          at most its share of N)
-- ARGV[3]  the ranks the fleet lists (live or held), space-separated; "*"
--          when unknown (nobody is dropped for it)
-- ARGV[4]  the ranks the fleet holds (silent, or pacing locally), which
--          keep max(their seats, their share of N). In the store: what the
--          other holders held beyond their shares when Redis last answered
--          (excess, below; N when not known lately), by which this
--          process's share is cut
-- ARGV[5]  N, the band's limit as the caller's code gives it (an integer
--          >= 1)
-- ARGV[6]  keep_ms: the keys' expiry after each write
-- ARGV[7]  "<I> <W> <known> <hold> [<deadline>]": the fleet's heartbeat
--          interval I, ms; W, ms; the start the caller last saw the key's
--          seats show ("u", 0: none); the fleet's SilentHold, ms; and,
--          optional, the call's deadline, Unix ms on the server's clock: a
--          call run after it is refused (PACER_STALE) and changes nothing
--          (the caller's view of the fleet is from before the stall:
--          holders silent across it would be taken for gone). A caller that saw
--          the key's seats on another server (a Redis restarted empty, a
--          replica promoted) is granted no seat, as in mode "x", for W after
--          this server started (every live holder renews its seats by then,
--          at its next heartbeat or its handback after an outage), and for
--          as long as the fleet holds members, up to W + hold (a held member
--          renews its seats only when it is back). One that never saw them cannot tell a restarted
--          server from a new one, and is not held back. A ranked holder the
--          fleet does not list is gone once it has not called on the key for
--          1.5 I (the caller's view of the fleet lags: a member that joined,
--          or came back to a Redis restarted empty, is listed at its next
--          heartbeat and heard of at the caller's); never in mode "x". A holder neither
--          held nor heard from for 3.5 I is gone too (its rank was taken
--          again by a member that does not use the key): the fleet holds a
--          member silent for 2 I, and the caller hears of it within 1.1 I.
--          The 1.5 I and 3.5 I count from when the call runs: a caller
--          sends a deadline, or a call Redis ran long after it was sent
--          (Redis stalled) could drop live holders.
-- acquire: ARGV[8] ticket, ARGV[9] cost (an integer >= 1), ARGV[10] "1" to
--          wait in the queue when no seat is free, "0" to refuse.
--          Reply {1, 0, used, N, start, excess} granted (also when the
--          ticket held its seats already), {0, place, used, N, start,
--          excess} queued (place 1 is the head), or {0, 0, used, N, start,
--          excess} refused (nothing written); in the store, {0, -1, used,
--          limit, 0, 0} when the cost is above this process's limit there.
--          start is the hash's "u" (0: unknown); excess what the other
--          holders hold beyond their shares of N (see ARGV[4]); -1 in mode
--          "x", where the server may lack seats.
-- release: ARGV[8] ticket. Reply {1 if it held seats else 0, excess,
--          tickets handed seats...}.
-- cancel:  ARGV[8] ticket: out of the queue, or its seats given back if it
--          held them. Reply as release.
-- renew:   ARGV[8] the caller's tickets, space-separated "<ticket>:<cost>:<s>"
--          with s "h" (holds seats: recorded if missing), "w" (waits:
--          queued if neither holding nor waiting) or "p" (a call in
--          flight: left as it is); every other ticket of the holder is
--          dropped, but for one numbered after ARGV[9] (optional): the
--          last ticket number the caller had made when it listed them,
--          base 36 as in a ticket ("<limiter id>.<n>"). A ticket made
--          after the list, granted before the renew ran, is a call open
--          (before, its seats were dropped and the fleet went over N).
--          The caller's tickets under a holder it was before (another
--          rank, or "i<id>") move to its holder, and that holder goes.
--          This makes the fleet's count exact again after an
--          outage or a Redis that lost the key. Reply {start, excess,
--          tickets of the caller that hold seats now...}, then the tickets
--          handed seats after "|".
-- read:    Reply {N, seats held, calls waiting, then per holder "<holder>
--          <limiter id> <seats>"...}; writes nothing. (Held members' shares
--          are not counted in it.)

local H, Q, T = KEYS[1], KEYS[2], KEYS[4]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local op = ARGV[1]
local me, holder, n, mode = string.match(ARGV[2], '^(%S+) (%S+) (%d+) ([rxl])$')
if not me then
  return redis.error_reply('PACER_ARG seats: member ' .. tostring(ARGV[2]))
end
if op ~= 'read' and not T then
  return redis.error_reply('PACER_ARG seats: ' .. tostring(op) .. ' needs the tickets key (KEYS[4])')
end
n = tonumber(n)
local codeN = tonumber(ARGV[5])
if not codeN or codeN < 1 or codeN ~= math.floor(codeN) then
  return redis.error_reply('PACER_ARG seats: N ' .. tostring(ARGV[5]))
end
local keep = tonumber(ARGV[6])
local beat, young, known, holdms, deadline = string.match(ARGV[7] or '', '^(%d+) (%d+) (%d+) (%d+) ?(%d*)$')
beat, young, known, holdms, deadline = tonumber(beat), tonumber(young), tonumber(known), tonumber(holdms), tonumber(deadline)
if not keep or not beat then
  return redis.error_reply('PACER_ARG seats: keep ' .. tostring(ARGV[6]) .. ', interval ' .. tostring(ARGV[7]))
end
-- A call Redis runs after its deadline (it stalled) changes nothing: its
-- caller has given up on it, and its view of the fleet (ARGV[3], [4]) is
-- from before the stall, against which holders silent across it would be
-- dropped as gone, their seats forgotten while their calls are open.
if deadline and now > deadline then
  return redis.error_reply('PACER_STALE seats: ran after its deadline')
end
local grace, lapse = beat * 1.5, beat * 3.5

local taken, held = nil, {}
if ARGV[3] ~= '*' then
  taken = {}
  for r in string.gmatch(ARGV[3], '%S+') do taken[r] = true end
end
for r in string.gmatch(ARGV[4], '%S+') do held[r] = true end

-- N: an operator's, else the caller's.
local N = codeN
if KEYS[3] then
  local s = redis.pcall('GET', KEYS[3])
  local v = type(s) == 'string' and tonumber(s) or nil
  if v and v >= 1 and v <= 1000000 and v == math.floor(v) then N = v end
end

-- The holders.
local owners, counter, started, passedAt = {}, 0, nil, nil
local flat = redis.call('HGETALL', H)
for i = 1, #flat, 2 do
  local f, v = flat[i], flat[i + 1]
  if string.sub(f, 1, 2) == 'r:' then
    local id, ms, c = string.match(v, '^(%S+) (%d+) (%d+)$')
    if id then owners[string.sub(f, 3)] = {id = id, ms = tonumber(ms), c = tonumber(c)} end
  elseif f == 'c' then
    counter = tonumber(v) or 0
  elseif f == 'u' then
    started = tonumber(v)
  elseif f == 'f' then
    passedAt = v
  end
end

-- A full Redis (maxmemory, noeviction) refuses a script's first write
-- that may add memory, but lets one that has written already go on, and
-- a call may drop gone holders and tickets (removals) before it adds: it
-- asks first. ZADD XX GT -inf changes no member of the queue, so with room
-- it does nothing; a full Redis refuses it, and the call ends with OOM,
-- nothing written (docs/protocol.md, "A full Redis"). A read writes
-- nothing.
if op ~= 'read' then redis.call('ZADD', Q, 'XX', 'GT', '-inf', 'full') end

-- A server that started less than W ago, where the caller saw the key's
-- seats on another, may have lost seats their holders have not renewed
-- yet: grant none (mode "x"). The start is read once per hash (INFO, which
-- a Redis user may be denied: then it is not known).
local changed = false
if mode ~= 'l' then
  if not started then
    local ok, info = pcall(redis.call, 'INFO', 'server')
    local up = ok and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
    if up then
      -- INFO counts whole seconds of the clock (a start at x.9 s is 1 s
      -- old at (x+1).0 s): take the latest start it allows.
      started = math.min(now, now - up * 1000 + 1000)
      if op ~= 'read' then redis.call('HSET', H, 'u', started); changed = true end
    end
  end
  if started and known ~= 0 and known ~= started then
    -- Held members (silent, or pacing locally) renew theirs only when
    -- back: until then, or until the fleet forgets them, none either.
    local anyHeld = next(held) ~= nil
    if now - started < young or (anyHeld and now - started < young + holdms) then mode = 'x' end
  end
end
-- The start the caller learns: held back, it keeps the one it knew, so
-- that it is held back until the window passes.
local learn = started or 0
if mode == 'x' and known ~= 0 then learn = known end

-- A holder's share of N while it paces locally: N split over the fleet's
-- ranks, the remainder to the lowest ranks, so the shares add up to N.
local function share(h)
  local r = tonumber(h)
  if n <= 1 or not r then return N end
  local s = math.floor(N / n)
  if r < N % n then s = s + 1 end
  return s
end

-- A holder's record written back.
local function save(h)
  local o = owners[h]
  redis.call('HSET', H, 'r:' .. h, o.id .. ' ' .. o.ms .. ' ' .. o.c)
  changed = true
end

-- Gone holders: in the store there are none (it holds this process's
-- seats alone). On Redis, a ranked holder the fleet no longer lists, one
-- whose place the caller now holds under another id, and one neither held
-- nor heard from within 3.5 I. Their seats count for nothing from now on.
--
-- Silence counts only while calls reach the key: a live holder with seats
-- or a call waiting renews them every I, so a gap between the key's calls
-- beyond I is the key's server not reached (it stalled, or a Cluster's
-- master froze while the fleet's records, on another master, answered: the
-- holders' heartbeats went on, their renews on the key failed). Every
-- holder's last call moves later by that much, so their silence stays as
-- it was before the gap (the last call the hash keeps is the latest of its
-- holders'). Before, a call at a thaw took a live holder for gone (the
-- combination runner's Cluster seed 27: a freeze of 3 s, 4 calls open on
-- N = 3). A holder gone for good is dropped once the key has been called
-- for 1.5 I or 3.5 I without it.
if mode ~= 'l' then
  local last, shifted = nil, false
  for _, o in pairs(owners) do
    if not last or o.ms > last then last = o.ms end
  end
  local gap = last and now - last - beat
  if gap and gap > 0 then
    for _, o in pairs(owners) do o.ms = o.ms + gap end
    shifted = true
  end
  local dels = {}
  for h, o in pairs(owners) do
    local g = false
    if h == holder then
      g = o.id ~= me
    elseif taken and mode ~= 'x' and tonumber(h) and not taken[h] and now - o.ms > grace then
      g = true
    elseif not held[h] and now - o.ms > lapse then
      g = true
    end
    if g then
      owners[h] = nil
      dels[#dels + 1] = 'r:' .. h
    end
  end
  -- A read writes nothing: the gone are left out of its figures only.
  if #dels > 0 and op ~= 'read' then redis.call('HDEL', H, unpack(dels)); changed = true end
  if shifted and op ~= 'read' then
    for h in pairs(owners) do save(h) end
  end
end

-- The Limiter id a ticket belongs to.
local function idOf(tk) return string.match(tk, '^(.*)%.[^.]*$') end

-- Whether a ticket's record (holder h) still counts: its holder is not
-- gone and is the Limiter that made it.
local function counts(h, tk)
  local o = owners[h]
  return o ~= nil and o.id == idOf(tk)
end

-- In the store, the limit is this process's share, less what the others
-- held beyond their shares when Redis last answered (ARGV[4] there): they
-- keep those seats while they pace locally, so the fleet stays within N.
local limit = N
if mode == 'l' then limit = math.max(0, share(holder) - (tonumber(ARGV[4]) or N)) end

-- Seats in use: each holder's own, and a held holder's share at least
-- (it may be pacing locally on it).
local function used()
  local u = 0
  for h, o in pairs(owners) do
    if mode ~= 'l' and held[h] and h ~= holder then u = u + math.max(o.c, share(h)) else u = u + o.c end
  end
  if mode ~= 'l' then
    for h in pairs(held) do
      if h ~= holder and not owners[h] then u = u + share(h) end
    end
  end
  return u
end

-- What the other holders hold beyond their shares of N: a member that
-- loses Redis takes that much less of its own share (see limit).
local function excess()
  if mode == 'x' then return -1 end -- this server may lack seats: no figure
  local e = 0
  for h, o in pairs(owners) do
    if h ~= holder then e = e + math.max(0, o.c - share(h)) end
  end
  return e
end

local function touch()
  local o = owners[holder]
  if o then o.ms = now else owners[holder] = {id = me, ms = now, c = 0} end
  save(holder)
end

local function record(v)
  if not v then return nil end
  local h, c = string.match(v, '^(%S+) (%d+)$')
  if not h then return nil end
  return {h = h, c = tonumber(c)}
end

-- Whether a waiting call's holder is held by the fleet (silent, or
-- pacing locally): its share of N is counted for it (used), and its calls
-- waiting on Redis are handed nothing until it is back (renew keeps their
-- places). A killed process the fleet held while unsure of it took every
-- seat of a band as they freed (combination runner, seed 18).
local function skipped(w)
  return mode ~= 'l' and held[w.h] and w.h ~= holder
end

-- The view in which skipped() passes calls over: the mode, the caller's
-- holder if it is held itself ("-" if not) and the held ranks, in order;
-- nil when it passes over none (no one held, or the store). Calls with
-- the same view pass over the same calls: every caller the fleet does not
-- hold passes over the held holders' calls alike, so their calls share
-- one view (before, each caller's holder made a view of its own, and
-- callers of two members took turns at reading every call passed over:
-- 0.6 ms of Redis a call with 1,000 waiting, BenchmarkSeatsPastHeld). And
-- where front() starts: a place (the queue's counter) that every call
-- waiting at or before it is passed over in this view (or counts for
-- nothing), "f" when written in this view; else before the first.
local view, from = nil, 0
if mode ~= 'l' and next(held) ~= nil then
  local hs = {}
  for h in pairs(held) do hs[#hs + 1] = h end
  table.sort(hs)
  view = mode .. ' ' .. (held[holder] and holder or '-') .. ' ' .. table.concat(hs, ' ')
  if passedAt then
    local v, p = string.match(passedAt, '^(.*) (%d+)$')
    if v == view then from = tonumber(p) end
  end
end

-- The first call waiting after place after (nil: from) whose holder is
-- not held, its record, and its place; nil if none. Tickets without a
-- record, or whose holder is gone, leave the queue; the calls of held
-- holders keep their places before it. The queue is read a ticket, then
-- 2, 4, up to 64 a command, their records with them: the head is most
-- often the one. A held member's calls waiting are passed over once: when
-- this call passes over any, it records where they end in "f", and the
-- calls in the same view start after them.
local function front(after)
  local start = after or from
  local at, size, passed = start, 1, false
  while true do
    local z = redis.call('ZRANGEBYSCORE', Q, '(' .. at, '+inf', 'WITHSCORES', 'LIMIT', 0, size)
    local found, fw, fp = nil, nil, nil
    if #z > 0 then
      size = math.min(2 * size, 64)
      local fields = {}
      for i = 1, #z, 2 do fields[#fields + 1] = 'w:' .. z[i] end
      local recs = redis.call('HMGET', T, unpack(fields))
      for i = 1, #z, 2 do
        local tk, p = z[i], tonumber(z[i + 1])
        local w = record(recs[(i + 1) / 2])
        if not (w and counts(w.h, tk)) then
          redis.call('ZREM', Q, tk)
          redis.call('HDEL', T, 'w:' .. tk)
          changed = true
        elseif not skipped(w) then
          found, fw, fp = tk, w, p
          break
        else
          passed = true
        end
        at = p
      end
    end
    if found or #z == 0 then
      -- Record where the calls passed over end (at: the last call read
      -- before the one found), when this call started where the view's
      -- record says (a hand-off's later calls start after the call it
      -- handed seats to).
      if passed and not after and at > from then
        redis.call('HSET', H, 'f', view .. ' ' .. at)
        from = at
        changed = true
      end
      return found, fw, fp
    end
  end
end

-- Hand free seats to the calls waiting, in the queue's order, while they
-- fit; the calls of held holders keep their places.
local function handoff()
  local out = {}
  if mode == 'x' then return out end
  local u = used()
  local at = nil -- (the calls before it are held: passed over once)
  while true do
    local tk, w
    tk, w, at = front(at)
    if not tk then break end
    if u + w.c > limit then break end
    redis.call('HSET', T, 's:' .. tk, w.h .. ' ' .. w.c)
    redis.call('HDEL', T, 'w:' .. tk)
    redis.call('ZREM', Q, tk)
    owners[w.h].c = owners[w.h].c + w.c
    save(w.h)
    u = u + w.c
    out[#out + 1] = tk
  end
  if #out > 0 and mode ~= 'l' then
    local prefix = string.match(H, '^(.-){')
    if prefix then
      redis.pcall('PUBLISH', prefix .. '{limiters}:events', 'seat ' .. H .. ' ' .. table.concat(out, ' '))
    end
  end
  return out
end

local function expire()
  if changed then
    redis.call('PEXPIRE', H, keep)
    redis.call('PEXPIRE', T, keep)
    redis.call('PEXPIRE', Q, keep)
  end
end

if op == 'read' then
  local u = 0
  local out = {N, 0, redis.call('ZCARD', Q)}
  for h, o in pairs(owners) do
    if o.c > 0 then
      u = u + o.c
      out[#out + 1] = h .. ' ' .. o.id .. ' ' .. o.c
    end
  end
  out[2] = u
  return out
end

if op == 'acquire' then
  local tk, cost, wait = ARGV[8], tonumber(ARGV[9]), ARGV[10]
  if not tk or not idOf(tk) or not cost or cost < 1 or cost ~= math.floor(cost) then
    return redis.error_reply('PACER_ARG seats: acquire ' .. tostring(tk) .. ' ' .. tostring(ARGV[9]))
  end
  if cost > limit then
    if mode == 'l' then return {0, -1, used(), limit, learn, excess()} end -- above this share
    return redis.error_reply('PACER_EXCEEDS seats: cost ' .. cost .. ' is above N ' .. limit)
  end
  local s = record(redis.call('HGET', T, 's:' .. tk))
  if s and counts(s.h, tk) then
    touch(); expire()
    return {1, 0, used(), limit, learn, excess()}
  end
  local queued = record(redis.call('HGET', T, 'w:' .. tk))
  if queued and not counts(queued.h, tk) then queued = nil end
  local h = front()
  local u = used()
  if mode ~= 'x' and (h == nil or h == tk) and u + cost <= limit then
    touch()
    redis.call('HSET', T, 's:' .. tk, holder .. ' ' .. cost)
    owners[holder].c = owners[holder].c + cost
    save(holder)
    if queued then
      redis.call('HDEL', T, 'w:' .. tk)
      redis.call('ZREM', Q, tk)
    end
    expire()
    return {1, 0, u + cost, limit, learn, excess()}
  end
  if wait ~= '1' then
    expire()
    return {0, 0, u, limit, learn, excess()}
  end
  touch()
  if not queued then
    counter = counter + 1
    redis.call('HSET', H, 'c', counter)
    redis.call('HSET', T, 'w:' .. tk, holder .. ' ' .. cost)
    redis.call('ZADD', Q, counter, tk)
  end
  local score = redis.call('ZSCORE', Q, tk)
  local place = redis.call('ZCOUNT', Q, '-inf', score)
  expire()
  return {0, place, u, limit, learn, excess()}
end

if op == 'release' or op == 'cancel' then
  local tk = ARGV[8]
  local had = 0
  local s = record(redis.call('HGET', T, 's:' .. tk))
  if s then
    redis.call('HDEL', T, 's:' .. tk)
    changed = true
    if counts(s.h, tk) then
      owners[s.h].c = math.max(0, owners[s.h].c - s.c)
      save(s.h)
      had = 1
    end
  elseif op == 'cancel' then
    if redis.call('HDEL', T, 'w:' .. tk) > 0 then
      redis.call('ZREM', Q, tk)
      changed = true
    end
  end
  local out = handoff()
  table.insert(out, 1, excess())
  table.insert(out, 1, had)
  expire()
  return out
end

if op == 'renew' then
  touch()
  local want = {}
  for item in string.gmatch(ARGV[8] or '', '%S+') do
    local tk, c, st = string.match(item, '^(.+):(%d+):([hwp])$')
    if not tk or not idOf(tk) then
      return redis.error_reply('PACER_ARG seats: renew ' .. item)
    end
    want[tk] = {c = tonumber(c), s = st}
  end
  local upTo = nil
  if ARGV[9] and ARGV[9] ~= '' then
    upTo = tonumber(ARGV[9], 36)
    if not upTo then
      return redis.error_reply('PACER_ARG seats: renew up to ' .. ARGV[9])
    end
  end
  -- Whether ticket tk (the caller's) was made after the list.
  local function after(tk)
    local x = upTo and tonumber(string.match(tk, '%.([^.]*)$') or '', 36)
    return x ~= nil and x > upTo
  end
  -- Every ticket: the caller's not in its list go, and those of holders
  -- gone (met here) with them. The caller's tickets under a place it held
  -- before (its rank changed: the fleet forgot it and it joined again)
  -- move to its place now, and the old place goes: left there, their
  -- seats went when it did (1.5 I after its last call, once the fleet no
  -- longer lists its rank), while the calls were open, and the fleet
  -- went over N (TestSeatsRankChangeKeepsOpenCalls).
  local seats, waits = {}, {}
  local dels, zrems = {}, {}
  local moved, olds = {}, {}
  local all = redis.call('HGETALL', T)
  for i = 1, #all, 2 do
    local kind, tk = string.sub(all[i], 1, 2), string.sub(all[i], 3)
    local rec = record(all[i + 1])
    local keepIt = rec ~= nil and counts(rec.h, tk)
    local mine = keepIt and (rec.h == holder or owners[rec.h].id == me)
    if mine and not want[tk] and not after(tk) then keepIt = false end
    if keepIt and mine and rec.h ~= holder then
      olds[rec.h] = true
      rec = {h = holder, c = rec.c}
      moved[#moved + 1] = all[i]
      moved[#moved + 1] = holder .. ' ' .. rec.c
    end
    if keepIt then
      if kind == 's:' then seats[tk] = rec else waits[tk] = rec end
    else
      dels[#dels + 1] = all[i]
      if kind == 'w:' then zrems[#zrems + 1] = tk end
    end
  end
  if #dels > 0 then redis.call('HDEL', T, unpack(dels)) end
  if #zrems > 0 then redis.call('ZREM', Q, unpack(zrems)) end
  if #moved > 0 then redis.call('HSET', T, unpack(moved)) end
  for h in pairs(olds) do
    if h ~= holder and owners[h] and owners[h].id == me then
      owners[h] = nil
      redis.call('HDEL', H, 'r:' .. h)
    end
  end
  -- In ticket order, so that calls queued again keep their order.
  local order = {}
  for tk in pairs(want) do order[#order + 1] = tk end
  table.sort(order)
  for _, tk in ipairs(order) do
    local w = want[tk]
    if w.s == 'h' and not seats[tk] then
      redis.call('HSET', T, 's:' .. tk, holder .. ' ' .. w.c)
      seats[tk] = {h = holder, c = w.c}
      if waits[tk] then
        redis.call('HDEL', T, 'w:' .. tk)
        redis.call('ZREM', Q, tk)
        waits[tk] = nil
      end
    elseif w.s == 'w' and not seats[tk] and not waits[tk] then
      counter = counter + 1
      redis.call('HSET', H, 'c', counter)
      redis.call('HSET', T, 'w:' .. tk, holder .. ' ' .. w.c)
      redis.call('ZADD', Q, counter, tk)
      waits[tk] = {h = holder, c = w.c}
    end
  end
  -- The holder's count is what its tickets hold.
  local c = 0
  for _, rec in pairs(seats) do
    if rec.h == holder then c = c + rec.c end
  end
  owners[holder].c = c
  save(holder)
  local handed = handoff()
  local mine = {}
  for tk in pairs(want) do
    if seats[tk] or redis.call('HGET', T, 's:' .. tk) then mine[#mine + 1] = tk end
  end
  table.sort(mine)
  local out = {learn, excess()}
  for _, tk in ipairs(mine) do out[#out + 1] = tk end
  out[#out + 1] = '|'
  for _, tk in ipairs(handed) do out[#out + 1] = tk end
  expire()
  return out
end

return redis.error_reply('PACER_ARG seats: operation ' .. tostring(op))
