-- heartbeat.lua: record a Limiter as live, with its mode, and tell it the
-- fleet: how many members it has, this Limiter's rank among them, and the
-- members held (silent lately, or pacing locally), whose shares the others
-- leave them (core.lua's ARGV[3]). Each Limiter runs it every heartbeat
-- interval. It does not use core.lua.
--
-- KEYS[1]  the fleet, a sorted set: member = Limiter id, score = Unix ms of
--          its last heartbeat (Redis server time)
-- KEYS[2]  the fleet's details, a hash: Limiter id -> "<mode> <since_ms>
--          <cid> <n>[ <run>]" (mode "redis" or "local": how it paces;
--          since_ms: Unix ms, the Limiter's clock, when that mode began; cid
--          the client id of its presence connection, named "pacer-<id>", 0
--          if none; n the fleet's size its local share counts, 0 if none,
--          1 for the whole of each key (a member that knew a fleet of one);
--          run the run id of the server that gave cid, absent if none or
--          written by an earlier version); and two fields of its own, "~n":
--          "<n> <since_ms> <before>", the fleet's size n as of since_ms
--          (server time), when a heartbeat first saw it, and the size before
--          it; "~t": Unix ms when a heartbeat last renewed the fleet's keys'
--          expiry (to hold_ms + hold_ms / 4: every hold_ms / 4, and when a
--          key may be new, so that they outlive the last heartbeat by
--          hold_ms at least); and "~r": "<n> <rank> <until_ms>...", the
--          ranks kept for members not back yet (see ARGV[8]), each until
--          its Unix ms, of a fleet of n (absent: none)
-- KEYS[3]  the policies reported: a hash key -> "<Unix ms> <policy>" (see
--          ARGV[10...]), with KEYS[6] the same keys scored by that time, so
--          that reports older than keep_ms are dropped
-- KEYS[4]  the members' ranks, a sorted set: member = Limiter id, score =
--          its rank. A Limiter takes a rank at its first heartbeat (the one
--          it asks for, its rank before Redis lost the fleet, if free, else
--          the smallest free) and keeps it while it lives, so that a member
--          joining or leaving changes no other member's rank. n, the fleet's
--          size as the shares count it, is the highest rank + 1 (a free rank
--          below it is a hole: its lattice instants go to the members on
--          Redis, to nobody while everybody paces locally).
-- KEYS[5]  suspects checked: a hash id -> Unix ms of the last check that
--          found it still connected, or minus the Unix ms of the first
--          check that found it gone after one had found it connected (see
--          ARGV[2] "check")
-- KEYS[6]  see KEYS[3]
-- KEYS[7]  the state format the fleet writes, a string set by the operator
--          (cmd/pacer format): "1", "3", or "2" (absent, or anything
--          else): format 2 is what the previous release reads and writes
--          after its own switch (core.lua's KEYS[1])
-- KEYS[8]  the format each member writes, a hash: Limiter id -> the
--          format this script told it (KEYS[7] as read), so that the
--          operator sees when every member writes the format set, and
--          which members are of a release that does not report (they are
--          in KEYS[1] without a field here)
-- KEYS[9]  the highest state format each member reads, a hash: Limiter id
--          -> "3" (written by this release's heartbeat; a member without a
--          field, of an earlier release, reads format 2 at most), so that
--          the operator's switch to format 3 (cmd/pacer format) is refused
--          while a member that cannot read it is in the fleet. Optional: a
--          caller that passes 8 keys records nothing there (nor in
--          KEYS[10..12]).
-- KEYS[10..12] the fleet's indexes, written only by the members told
--          format "3" (the writers), so that a heartbeat's cost does not
--          grow with the fleet (docs/protocol.md, Heartbeat). Optional: a
--          caller that passes fewer than 12 keys keeps none, as a member
--          of an earlier release.
-- KEYS[10] the writers, a sorted set: member = Limiter id, score = Unix ms
--          of its last heartbeat (KEYS[1]'s, for the writers alone)
-- KEYS[11] the writers pacing locally (their last heartbeat said
--          "local"), the same
-- KEYS[12] the holes, a sorted set: the free ranks below the highest
--          taken (member and score the rank), and member "v" scored -1
--          while it is kept whole; absent or without "v": not kept (a
--          member that does not write it took a rank, or a writer found a
--          member that is not one in the fleet), and the next writer that
--          finds every member a writer builds it again from KEYS[4]
-- ARGV[1]  this Limiter's id
-- ARGV[2]  "redis" or "local" (a heartbeat); "leave" (Close: remove it;
--          reply {now_ms}); "report": ARGV[10...]'s reports alone, written
--          as a heartbeat writes them (ARGV[5] hold_ms and ARGV[7] keep_ms
--          as there, ARGV[3], [4], [6], [8] and [9] unused), the stale
--          pruned 20 at most, the fleet's records untouched (a member sends
--          its reports in chunks after its heartbeat, so that no call holds
--          Redis long); reply {now_ms}; or "check": ARGV[3] is a space-separated list of
--          ids found without any connection (removed: the process is gone)
--          and ARGV[4] of ids found connected (not checked again for
--          suspect_ms), ARGV[5] "1" if the caller itself lost Redis
--          within hold_ms, Redis not answering it (then a member found
--          gone at its first check is held one check more, below); reply
--          {now_ms, the ids forgotten...} (see below)
-- ARGV[3]  since_ms (integer), then " <cid> <n>[ <run>]" (see KEYS[2];
--          only a Limiter with a presence connection can be a suspect)
-- ARGV[4]  live_ms: a Limiter heard from within this is live
-- ARGV[5]  hold_ms: a Limiter silent longer than live_ms but heard from
--          within hold_ms is counted as held (it may be pacing locally);
--          one silent longer is forgotten
-- ARGV[6]  suspect_ms: a Limiter silent longer than this is a suspect: the
--          caller checks whether its process still holds a connection
--          (CLIENT LIST), at most once per suspect_ms each
-- ARGV[7]  keep_ms: how long a reported policy is kept after its report
-- ARGV[8]  the rank this Limiter asks for ("" for any): the one it had
--          (taken if free and below 1,000,000, else the smallest free that
--          is not kept); then optionally " keep <keep_ms> <n> <rank>...":
--          back from an outage of its own on a Redis that lost the fleet
--          (restarted empty), this Limiter remembers a fleet of n whose
--          members at these ranks are not back yet and may still pace
--          locally on their shares. The ranks are kept for keep_ms (each
--          heartbeat that sends them renews them): a member that takes no
--          rank it asks for is not given one of them, and each kept rank
--          below the reply's n that no member holds counts as held, with
--          the keep's n as their fleet's size (held_n), in every member's
--          reply. A malformed keep is refused (PACER_ARG). Without it, a
--          newcomer took the rank of a member still pacing locally, and
--          the whole key on Redis beside it (combination runner, seed 49)
-- ARGV[9]  the heartbeat's deadline, Unix ms on the server's clock as the
--          caller estimates it ("" or absent: none): one that runs later
--          is refused (PACER_STALE) and changes nothing. Its caller has
--          given up on it already; a Redis that stalled (frozen, a long
--          fork) runs the commands queued meanwhile when it resumes, and
--          a heartbeat sent before its Limiter lost Redis would make it
--          look live and on Redis while it paces locally (combination
--          runner, seed 72).
-- ARGV[10...]  optional pairs: a key, and "<Unix ms> <policy>", the policy
--          this Limiter's code passes for it (reserve's stored text form).
--          A pair whose policy KEYS[3] holds already, in a report younger
--          than keep_ms / 3 (by its Unix ms), is not written: each member
--          using a key reports it, and the fleet writes it about once per
--          keep_ms / 3, which keeps it (docs/protocol.md, Heartbeat)
-- Reply    {now_ms} for a heartbeat sent before its Limiter's latest change
--          of mode (its since_ms older than the one recorded for the other
--          mode: it changes nothing); else
--          {now_ms, live, held, rank, n, held_ranks, suspects, held_n,
--          before, holes, format, held_sizes}:
--          live includes this Limiter; live + held is the number of
--          members, n the highest rank + 1; held_ranks the ranks of the held
--          members; held_n the largest n the held members count (their
--          lattice: the members on Redis keep to it while they are held);
--          suspects, triples of a Limiter id, its presence connection's
--          client id and the run id of the server that gave it ("" if not
--          known), to check (CLIENT LIST ID) if the caller is connected to
--          that server. Another Limiter
--          heard from within live_ms whose mode is "local" counts as held:
--          it reaches the fleet's set but not its keys (a Redis Cluster
--          with the key's shard failing over) and paces locally on its
--          share, which the others must leave it. before is the fleet's
--          size before its latest change if that change is younger than
--          2 * suspect_ms (every member hears of it within about one
--          interval, suspect_ms), else 0: until then members may pace
--          locally on either size (reserve's fleet.go, a member share's "also").
--          holes are the ranks below n that no member holds (every
--          other rank below n is taken, by a member live or held). format
--          is the state format this Limiter writes from now on ("1", "2"
--          or "3": KEYS[7]). held_sizes are the fleet sizes the held
--          members' local shares count, each once, in ascending order
--          (held_n the largest): when they are more than one, the held
--          members pace on lattices of different sizes (they lost Redis
--          around a change of the fleet, and heard of it or not), which no
--          share of one size keeps within (reserve's fleet.go: the members
--          on Redis wait for them; combination runner, seed 15).
--          Cost: when every member of KEYS[1] is a writer (KEYS[10]), the
--          reply comes from the indexes, and the heartbeat's time grows
--          with what changed (members silent, pacing locally, suspects,
--          joined or forgotten, holes), not with the fleet; otherwise
--          (a member of an earlier release, or one not told "3" yet) it
--          reads every member, as the release before did.

local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local id, mode = ARGV[1], ARGV[2]
-- The indexes (KEYS[10..12]) are passed (12 keys): this caller keeps them
-- when told format 3.
local indexed = KEYS[12] ~= nil
-- The top rank taken (-1: none).
local function top_rank()
  local top = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  return tonumber(top[2]) or -1
end
-- ZADD of the ranks rs to the holes (members and scores the ranks).
local function add_holes(rs)
  local zs = {}
  for _, r in ipairs(rs) do
    zs[#zs + 1] = r
    zs[#zs + 1] = string.format('%d', r)
    if #zs >= 1000 then
      redis.call('ZADD', KEYS[12], unpack(zs))
      zs = {}
    end
  end
  if #zs > 0 then
    redis.call('ZADD', KEYS[12], unpack(zs))
  end
end
-- The holes, built again from the ranks (a writer, when they are not kept).
local function build_holes()
  local used = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  local taken, top = {}, -1
  for i = 2, #used, 2 do
    local r = tonumber(used[i])
    taken[r] = true
    if r > top then
      top = r
    end
  end
  redis.call('DEL', KEYS[12])
  local rs = {}
  for r = 0, top - 1 do
    if not taken[r] then
      rs[#rs + 1] = r
    end
  end
  add_holes(rs)
  redis.call('ZADD', KEYS[12], -1, 'v')
  local hold = tonumber(ARGV[5])
  if hold then
    redis.call('PEXPIRE', KEYS[12], hold + math.floor(hold / 4))
  end
end
local function forget(ids)
  if #ids > 0 then
    -- The holes, when kept: the ranks freed below the new top join them,
    -- and those above it leave.
    local kept = indexed and redis.call('ZSCORE', KEYS[12], 'v')
    local freed = {}
    if kept then
      for _, x in ipairs(ids) do
        local r = tonumber(redis.call('ZSCORE', KEYS[4], x))
        if r then
          freed[#freed + 1] = r
        end
      end
    end
    redis.call('ZREM', KEYS[1], unpack(ids))
    redis.call('ZREM', KEYS[4], unpack(ids))
    redis.call('HDEL', KEYS[2], unpack(ids))
    redis.call('HDEL', KEYS[5], unpack(ids))
    redis.call('HDEL', KEYS[8], unpack(ids))
    if KEYS[9] then
      redis.call('HDEL', KEYS[9], unpack(ids))
    end
    if indexed then
      redis.call('ZREM', KEYS[10], unpack(ids))
      redis.call('ZREM', KEYS[11], unpack(ids))
    end
    if #freed > 0 then
      local top = top_rank()
      redis.call('ZREMRANGEBYSCORE', KEYS[12], '(' .. string.format('%d', top), '+inf')
      local below = {}
      for _, r in ipairs(freed) do
        if r < top then
          below[#below + 1] = r
        end
      end
      add_holes(below)
    end
  end
end
-- The reports of ARGV[10...] (see there). A report the fleet holds
-- already, of the same policy and younger than keep_ms / 3 (another member
-- made it, or this one lately), is not written again: every member using a
-- key reports it, and one write per keep_ms / 3 keeps it.
local function write_reports(keep_ms)
  if #ARGV <= 10 then
    return
  end
  local ks = {}
  for i = 10, #ARGV - 1, 2 do
    ks[#ks + 1] = ARGV[i]
  end
  local held = redis.call('HMGET', KEYS[3], unpack(ks))
  local fresh = now_ms - math.floor(keep_ms / 3)
  local hs, zs = {}, {}
  for j = 1, #ks do
    local v = ARGV[8 + 2 * j + 1]
    local ms = string.match(v, '^(%d+)')
    local h = held[j]
    local hms, hp = nil, nil
    if h then
      hms, hp = string.match(h, '^(%d+) (.*)$')
    end
    if not (hms and tonumber(hms) > fresh and hp == string.match(v, '^%d+ (.*)$')) then
      hs[#hs + 1] = ks[j]
      hs[#hs + 1] = v
      zs[#zs + 1] = ms or now_ms
      zs[#zs + 1] = ks[j]
    end
  end
  if #hs > 0 then
    redis.call('HSET', KEYS[3], unpack(hs))
    redis.call('ZADD', KEYS[6], unpack(zs))
  end
end
-- Reports not renewed within keep_ms go (their Limiters stopped using the
-- keys, or are gone), at most limit a call: a call's time stays bounded,
-- and each can add no more.
local function prune_reports(keep_ms, limit)
  local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. string.format('%d', now_ms - keep_ms), 'LIMIT', 0, limit)
  if #stale > 0 then
    redis.call('HDEL', KEYS[3], unpack(stale))
    redis.call('ZREM', KEYS[6], unpack(stale))
  end
end
if mode == 'report' then
  -- Reports alone, a chunk at a time (reserve's reportChunk), after a
  -- heartbeat: the fleet's records are not touched. Reply {now_ms}.
  local keep_ms = tonumber(ARGV[7])
  if not keep_ms or keep_ms <= 0 or #ARGV % 2 ~= 1 then
    return redis.error_reply('PACER_ARG report: want keep_ms (ARGV[7]) and key, report pairs from ARGV[10]')
  end
  write_reports(keep_ms)
  prune_reports(keep_ms, 20)
  local keep = math.max(tonumber(ARGV[5]) or 0, keep_ms)
  redis.call('PEXPIRE', KEYS[3], keep)
  redis.call('PEXPIRE', KEYS[6], keep)
  return {now_ms}
end
if mode == 'leave' then
  forget({id})
  return {now_ms}
end
if mode == 'check' then
  -- A member found without its connection is forgotten, unless an earlier
  -- check found it connected while it was silent: then it was alive and
  -- cut off from Redis, and a connection that closes now most likely
  -- closed as the network healed (a reset, a proxy's), while the member
  -- still paces locally until its next probe. It stays held one check
  -- more, 2 * suspect_ms later (the value "-<now_ms>"), and is forgotten
  -- if still gone and silent then. So is one no check has found yet when
  -- the caller itself lost Redis lately, Redis not answering it (ARGV[5]
  -- "1"; not for refusals, which close no connection): a member silent
  -- since then most likely lost Redis too, nobody could check it while
  -- the network was down, and the network that healed for the caller may
  -- have reset its connection while it still paces locally
  -- (TestFaultTimeout: 248 calls in 1 s, bound 221: the member back on
  -- Redis first took the whole rate beside the other for a second).
  -- Reply {now_ms, forgotten ids...}.
  local gone, alive = {}, {}
  local out = {now_ms}
  local unsure = ARGV[5] == '1'
  for x in string.gmatch(ARGV[3] or '', '%S+') do
    local c = tonumber(redis.call('HMGET', KEYS[5], x)[1])
    if ((c and c > 0) or (not c and unsure)) and redis.call('ZSCORE', KEYS[1], x) then
      redis.call('HSET', KEYS[5], x, -now_ms)
    else
      gone[#gone + 1] = x
      out[#out + 1] = x
    end
  end
  forget(gone)
  for x in string.gmatch(ARGV[4] or '', '%S+') do
    if redis.call('ZSCORE', KEYS[1], x) then
      redis.call('HSET', KEYS[5], x, now_ms)
    end
  end
  -- The checks expire with the fleet (a heartbeat renews both).
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
  return out
end
local deadline = tonumber(ARGV[9] or '')
if deadline and now_ms > deadline then
  return redis.error_reply('PACER_STALE the heartbeat ran after its deadline')
end
-- A heartbeat sent before its Limiter last changed mode (its since_ms is
-- older than the one recorded, for the other mode) changes nothing, and
-- the reply is {now_ms}: a Redis that stalled runs the calls queued meanwhile
-- in no set order, and one saying "redis" from before the Limiter switched
-- to local pacing must not undo the one saying "local" (combination runner,
-- seed 37: a member counted on Redis while it paced locally, and two calls
-- at one instant).
-- (This member's record, and the fleet's size as of when: see below.)
local recs = redis.call('HMGET', KEYS[2], id, '~n', '~t', '~r') -- HMGET: in docs/security.md's ACL
do
  local rec = recs[1]
  local rmode, rsince = string.match(rec or '', '^(%S+) (%d+)')
  local since = tonumber(string.match(ARGV[3] or '', '^(%d+)'))
  if rmode and rmode ~= mode and since and tonumber(rsince) > since then
    return {now_ms}
  end
end
local live_ms, hold_ms, suspect_ms, keep_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if not live_ms or not hold_ms or not suspect_ms or not keep_ms or live_ms <= 0 or hold_ms < live_ms
    or suspect_ms <= 0 or keep_ms <= 0 or (mode ~= 'redis' and mode ~= 'local') then
  return redis.error_reply('PACER_ARG want id, mode, since_ms, live_ms <= hold_ms, suspect_ms, keep_ms')
end
-- ARGV[8]: the rank asked for, and the ranks to keep (see there).
local want_arg, keep_ms_arg, keep_n, keep_ranks = ARGV[8] or '', nil, nil, {}
do
  local w, rest = string.match(want_arg, '^(%S*)%s*(.*)$')
  want_arg = w
  if rest ~= '' then
    local ts = {}
    for x in string.gmatch(rest, '%S+') do
      ts[#ts + 1] = x
    end
    keep_ms_arg, keep_n = tonumber(ts[2]), tonumber(ts[3])
    local ok = ts[1] == 'keep' and keep_ms_arg and keep_ms_arg > 0 and keep_n and keep_n >= 1
      and keep_n == math.floor(keep_n) and keep_n <= 1000000 and #ts >= 4
    for i = 4, #ts do
      local r = tonumber(ts[i])
      if not (r and r >= 0 and r == math.floor(r) and r < keep_n) then
        ok = false
        break
      end
      keep_ranks[#keep_ranks + 1] = r
    end
    if not ok then
      return redis.error_reply('PACER_ARG ARGV[8] want "[<rank>][ keep <keep_ms> <n> <rank>...]", ranks below n')
    end
  end
end
forget(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', now_ms - hold_ms)))
local format = redis.pcall('GET', KEYS[7])
if format ~= '1' and format ~= '3' then
  format = '2'
end
-- A writer: told format 3 (the operator switched the fleet, which
-- cmd/pacer format refuses while a member that does not read format 3,
-- of an earlier release, is in the fleet: KEYS[9]).
local writer = indexed and format == '3'
-- The keys' expiry is renewed to hold_ms + hold_ms / 4 at least every
-- hold_ms / 4 (the fleet's "~t", when it was last), and whenever a key may
-- have been made: so they live at least hold_ms after the last heartbeat,
-- and most heartbeats renew none (ten commands fewer).
local renewed = tonumber(recs[3])
local renew = not renewed or now_ms - renewed >= hold_ms / 4 or #ARGV > 10
-- This ZADD is the heartbeat's first write (but forget's, above, when
-- members are forgotten): at its maxmemory (noeviction) Redis refuses it
-- with OOM, and the whole heartbeat fails, as every script does there, so
-- that its member paces locally until Redis has room (an outage,
-- reserve/call.go). Redis lets a script that has written anything already
-- go on (it cannot stop it midway), so no write may come before it: a
-- heartbeat that went through a full Redis would bring its member back
-- while its reservations fail, and a newcomer would join the fleet
-- meanwhile (combination runner, seed 1: members flapped between Redis and
-- local pacing every few ms; lua's TestHeartbeatRefusedWhenFull).
if redis.call('ZADD', KEYS[1], now_ms, id) == 1 then
  renew = true -- a member new to the fleet: its records may be new too
end
-- The ranks kept (KEYS[2]'s "~r"): those not expired, and this heartbeat's
-- (ARGV[8]), renewed. Written after the ZADD above: no write before it.
local kept, kept_n = {}, 0
do
  local ts = {}
  for x in string.gmatch(recs[4] or '', '%S+') do
    ts[#ts + 1] = tonumber(x)
  end
  local changed = false
  for i = 2, #ts - 1, 2 do
    if ts[i] and ts[i + 1] and ts[i + 1] > now_ms then
      kept[ts[i]] = ts[i + 1]
      kept_n = math.max(kept_n, tonumber(ts[1]) or 0)
    else
      changed = true
    end
  end
  if keep_ms_arg then
    local untl = now_ms + math.floor(keep_ms_arg)
    for _, r in ipairs(keep_ranks) do
      kept[r] = math.max(kept[r] or 0, untl)
    end
    kept_n = math.max(kept_n, keep_n)
    changed = true
  end
  if changed then
    local rs = {}
    for r in pairs(kept) do
      rs[#rs + 1] = r
    end
    table.sort(rs)
    local out = {}
    for _, r in ipairs(rs) do
      out[#out + 1] = string.format('%d %d', r, kept[r])
    end
    if #out > 0 then
      redis.call('HSET', KEYS[2], '~r', string.format('%d', kept_n) .. ' ' .. table.concat(out, ' '))
    else
      redis.call('HDEL', KEYS[2], '~r')
    end
  end
end
-- The writers' records are forgotten with the fleet's (above), and by the
-- same rule here too: one a member of an earlier release forgot (by its
-- own hold_ms, or its leave) would otherwise stay. (This member's own
-- record is added below.)
if indexed then
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', '(' .. string.format('%d', now_ms - hold_ms))
end
local rmode = string.match(recs[1] or '', '^(%S+) ')
if writer then
  if redis.call('ZADD', KEYS[10], now_ms, id) == 1 then
    renew = true
  end
  if mode == 'local' then
    if redis.call('ZADD', KEYS[11], now_ms, id) == 1 then
      renew = true
    end
  elseif rmode == 'local' then
    redis.call('ZREM', KEYS[11], id)
  end
elseif indexed and redis.call('ZREM', KEYS[10], id) == 1 then
  -- Not a writer any more: out of the indexes, so that a writer that
  -- counts one member of the fleet not indexed reads them all.
  redis.call('ZREM', KEYS[11], id)
end
local members = redis.call('ZCARD', KEYS[1])
-- Every member a writer: the indexes tell the fleet (below). Otherwise the
-- holes are not trusted (a member of an earlier release, with 8 keys, takes
-- and frees ranks without them): this heartbeat reads every rank, a writer
-- deletes the holes, and the first to find every member a writer again
-- builds them.
local fast = writer and redis.call('ZCARD', KEYS[10]) == members
local my_rank = tonumber(redis.call('ZSCORE', KEYS[4], id))
if not my_rank then
  renew = true
  if fast and not redis.call('ZSCORE', KEYS[12], 'v') then
    build_holes()
  end
  local want = tonumber(want_arg)
  if not (want and want >= 0 and want == math.floor(want) and want < 1000000 and #redis.call('ZRANGEBYSCORE', KEYS[4], want, want, 'LIMIT', 0, 1) == 0) then
    want = nil
  end
  local nkept = 0
  for _ in pairs(kept) do
    nkept = nkept + 1
  end
  if fast then
    -- The holes are kept (built above if they were not): the smallest
    -- free rank not kept is the first such hole, else the first above
    -- the top.
    local top = top_rank()
    if not want then
      local hs = redis.call('ZRANGEBYSCORE', KEYS[12], 0, '+inf', 'LIMIT', 0, nkept + 1)
      for _, h in ipairs(hs) do
        if not kept[tonumber(h)] then
          want = tonumber(h)
          break
        end
      end
      if not want then
        want = top + 1
        while kept[want] do
          want = want + 1
        end
      end
    end
    if want < top then
      redis.call('ZREM', KEYS[12], string.format('%d', want))
    elseif want > top + 1 then
      local rs = {}
      for r = top + 1, want - 1 do
        rs[#rs + 1] = r
      end
      add_holes(rs)
    end
  else
    if not want then
      -- The smallest free rank.
      local used = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
      local taken = {}
      for i = 2, #used, 2 do
        taken[tonumber(used[i])] = true
      end
      want = 0
      while taken[want] or kept[want] do
        want = want + 1
      end
    end
    -- Holes not kept now: the next writer that finds every member a
    -- writer builds them again.
    if indexed then
      redis.call('DEL', KEYS[12])
    end
  end
  redis.call('ZADD', KEYS[4], want, id)
  my_rank = want
end
redis.call('HSET', KEYS[2], id, mode .. ' ' .. ARGV[3])
redis.call('HDEL', KEYS[5], id)
redis.call('HSET', KEYS[8], id, format)
write_reports(keep_ms)
prune_reports(keep_ms, 100)
if renew then
  redis.call('HSET', KEYS[2], '~t', string.format('%d', now_ms))
  -- What this member reads: written when it joins (a member forgotten
  -- joins again) and with each renewal, not every heartbeat.
  if KEYS[9] then
    redis.call('HSET', KEYS[9], id, '3')
  end
  local ttl = hold_ms + math.floor(hold_ms / 4)
  for i = 1, #KEYS do
    if i ~= 3 and i ~= 6 and i ~= 7 then
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  end
  redis.call('PEXPIRE', KEYS[3], math.max(ttl, keep_ms))
  redis.call('PEXPIRE', KEYS[6], math.max(ttl, keep_ms))
end

local held_ranks = {}
local held_n = 0
-- held_sizes: the sizes noted, as a set.
local held_sizes = {}
local function note_size(hn)
  if hn and hn > 0 then
    held_sizes[hn] = true
    if hn > held_n then
      held_n = hn
    end
  end
end
local function note_n(detail)
  note_size(detail and tonumber(string.match(detail, '^%S+ %S+ %d+ (%d+)')))
end
-- The members not heard from within live_ms (silent: held) or suspect_ms
-- (quiet: suspects, see below), in one range of the heartbeat set.
local silent, quiet = {}, {}
do
  local edge = now_ms - math.min(live_ms, suspect_ms)
  local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', edge), 'WITHSCORES')
  for i = 1, #old, 2 do
    local at = tonumber(old[i + 1])
    if at < now_ms - live_ms then
      silent[#silent + 1] = old[i]
    end
    if at < now_ms - suspect_ms then
      quiet[#quiet + 1] = old[i]
    end
  end
end
-- The others held: heard from within live_ms, pacing locally.
local locals = {}
if fast then
  -- Those of KEYS[11] so heard.
  local ls = redis.call('ZRANGE', KEYS[11], 0, -1, 'WITHSCORES')
  for i = 1, #ls, 2 do
    if ls[i] ~= id and tonumber(ls[i + 1]) >= now_ms - live_ms then
      locals[#locals + 1] = ls[i]
    end
  end
  if #ls > 2 * #locals + 2 then
    -- Writers forgotten by a member that does not keep the indexes.
    redis.call('ZREMRANGEBYSCORE', KEYS[11], '-inf', '(' .. string.format('%d', now_ms - hold_ms))
  end
else
  -- Every member heard from within live_ms, and its mode.
  local heard = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('%d', now_ms - live_ms), '+inf')
  if #heard > 1 then
    local modes = redis.call('HMGET', KEYS[2], unpack(heard))
    for i = 1, #heard do
      local m = modes[i]
      if heard[i] ~= id and m and string.sub(m, 1, 6) == 'local ' then
        locals[#locals + 1] = heard[i]
      end
    end
  end
end
local live = members - #silent - #locals
-- The details of the silent, the quiet and the local ones (one read).
local details = {}
do
  local xs = {}
  for _, x in ipairs(#silent > #quiet and silent or quiet) do
    xs[#xs + 1] = x
  end
  for _, x in ipairs(locals) do
    xs[#xs + 1] = x
  end
  if #xs > 0 then
    local ds = redis.call('HMGET', KEYS[2], unpack(xs))
    for i = 1, #xs do
      details[xs[i]] = ds[i]
    end
  end
end
local held = {}
for _, x in ipairs(silent) do
  held[#held + 1] = x
end
for _, x in ipairs(locals) do
  held[#held + 1] = x
end
for _, x in ipairs(held) do
  note_n(details[x])
end
for _, x in ipairs(held) do
  -- (An earlier version's member has no rank: it is counted, not ranked.)
  local r = tonumber(redis.call('ZSCORE', KEYS[4], x))
  if r then
    held_ranks[#held_ranks + 1] = r
  end
end
local suspects = {}
if #quiet > 0 then
  local checked = redis.call('HMGET', KEYS[5], unpack(quiet))
  for i = 1, #quiet do
    local d = details[quiet[i]]
    local cid = d and string.match(d, '^%S+ %S+ (%d+)')
    local c = tonumber(checked[i])
    if cid and cid ~= '0' and (not c or (c > 0 and c < now_ms - suspect_ms) or (c <= 0 and -c < now_ms - 2 * suspect_ms)) then
      suspects[#suspects + 1] = quiet[i]
      suspects[#suspects + 1] = cid
      suspects[#suspects + 1] = string.match(d, '^%S+ %S+ %d+ %d+ (%S+)') or ''
    end
  end
end
local n = top_rank() + 1
-- The fleet's size as of when: a change younger than 2 * suspect_ms
-- reports the size before it.
local before = 0
local rec = recs[2]
local rn, rsince, rbefore = nil, nil, nil
if rec then
  rn, rsince, rbefore = string.match(rec, '^(%d+) (%d+) (%d+)$')
  rn, rsince, rbefore = tonumber(rn), tonumber(rsince), tonumber(rbefore)
end
if not rn then
  redis.call('HSET', KEYS[2], '~n', n .. ' ' .. string.format('%d', now_ms) .. ' ' .. n)
elseif rn ~= n then
  -- (Two changes within the window: the size just before this one. A
  -- member that heard of neither is rarer than one that heard of one.)
  redis.call('HSET', KEYS[2], '~n', n .. ' ' .. string.format('%d', now_ms) .. ' ' .. rn)
  before = rn
elseif now_ms - rsince < 2 * suspect_ms and rbefore ~= n then
  before = rbefore
end
-- The holes below n: kept by the writers when every member is one, else
-- from every rank.
local holes = {}
if fast then
  local hs = redis.call('ZRANGEBYSCORE', KEYS[12], -1, '(' .. string.format('%d', n))
  if hs[1] ~= 'v' then
    -- Not kept (a member that is not a writer took a rank, or was in the
    -- fleet at a writer's heartbeat): built again.
    build_holes()
    hs = redis.call('ZRANGEBYSCORE', KEYS[12], -1, '(' .. string.format('%d', n))
  end
  for i = 2, #hs do
    holes[#holes + 1] = tonumber(hs[i])
  end
else
  local ranked = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  local taken = {}
  for i = 2, #ranked, 2 do
    taken[tonumber(ranked[i])] = true
  end
  for r = 0, n - 1 do
    if not taken[r] then
      holes[#holes + 1] = r
    end
  end
  if writer then
    redis.call('DEL', KEYS[12])
  end
end
-- The ranks kept for members not back yet that are holes (below n, no
-- member holds them): held, on their fleet's size. (One above the top
-- taken becomes a hole when a newcomer takes a rank above it.)
for _, r in ipairs(holes) do
  if kept[r] then
    held_ranks[#held_ranks + 1] = r
    note_size(kept_n)
  end
end
local sizes = {}
for s in pairs(held_sizes) do
  sizes[#sizes + 1] = s
end
table.sort(sizes)
return {now_ms, live, members - live, my_rank, n, held_ranks, suspects, held_n, before, holes, format, sizes}
