-- fair.lua: the turn of a tenant in a lane (docs/design.md, "Fair share
-- and lanes"). lua.go puts it between core.lua and reserve.lua to make the
-- fair script: reserve.lua then books a request only when it is the
-- tenant's turn and the slot lies within the booking horizon, and
-- otherwise defers it (seq -3), booking nothing.
--
-- A batch is one tenant's requests in one lane, in the order they queued.
-- The rule:
--   horizon  a request is booked only if its slot is at most H from now:
--            H = max(d, hmin) in the Urgent and Normal lanes and 0 in the
--            Batch lane (booked only when due), d being the request's
--            duration: its cost on the band it takes longest to refill
--            or renew (cost / rate, or cost * window length / N), at the
--            whole rate;
--   priority a lane is booked only while no tenant of a higher lane is
--            waiting, except that with a minimum share m a blocked lane
--            is booked one request per d / m;
--   turn     within a lane, stride scheduling on virtual time: tenant t's
--            pass P_t advances by d / w_t on each request booked; a request
--            is booked only if its start max(P_t, V) is not after the least
--            start of the other tenants waiting in the lane. V, the lane's
--            virtual time, moves on by d / (w_t * the number waiting) per
--            request booked, never past a waiting tenant's start.
--   due      a tenant deferred for the horizon alone (in its turn, its slot
--            beyond H) is due from the earliest time it was told to ask
--            again, until it books or is deferred for another tenant's
--            turn or a lane: a request of a due tenant in its turn is
--            booked wherever its slot lies (within its caller's maximum
--            wait). Calls without a tenant book with no horizon and may
--            take each slot before it comes within a fair request's: a
--            tenant is deferred for the horizon once, not at every ask.
-- A deferred tenant is waiting until it books again, or until its
-- waiting lapses (grace after the retry it was told); the first request
-- deferred defers the rest of the batch. A batch whose requests are all
-- deferred past their callers' maximum waits (AllowN, TryReserveN), with
-- nothing queued behind it, leaves the tenant not waiting. Tenants whose
-- pass V has passed are forgotten (their pass reads as V), as are the
-- least of more than max_tenants, and every fair key expires after
-- idle_us without a call.
--
-- KEYS[4]      a hash: "v<l>" lane l's virtual time (µs), "e<l>" when
--              lane l may next use its minimum share (Unix µs), "u<l>:<t>"
--              until when tenant t is waiting in lane l (Unix µs), "a<l>:<t>"
--              from when it is due (Unix µs)
-- KEYS[5..7]   per lane (Urgent, Normal, Batch), a zset of the waiting
--              tenants by start (µs of virtual time)
-- KEYS[8..10]  per lane, a zset of the tenants by pass, those not yet
--              forgotten
-- KEYS[11]     the stored weights (cmd/pacer weight; admin.lua), a hash:
--              tenant to weight, in every lane. A stored weight replaces
--              the caller's. Never written here, and it does not expire.
-- KEYS[12]     the figures' expiry, a zset: the fields of KEYS[4] that
--              hold figures (below) by when they lapse (Unix µs); each call
--              removes a few that have
-- ARGV[opi]    "<lane> <weight> <hmin_us> <minshare> <last> <grace_us>
--              <queued> <age_us> <id>": lane 1 (Urgent), 2 (Normal) or 3
--              (Batch); weight > 0; hmin_us >= 0; 0 <= minshare < 1; last 1
--              when the batch holds every request the tenant has queued in
--              this process; queued, how many it has queued there (the
--              batch included), age_us how long the first of them has
--              waited, and id the Limiter's (no spaces), for the figures
-- ARGV[opi+1]  the tenant (any string, "" included)
-- Several tenants' batches may share one call: a spec that ends in a
--              tenth word, "<n>" (>= 1), takes the call's next n requests
--              and is followed by another spec and tenant pair; the pair
--              without one takes the rest of the requests (at least one).
--              The pairs' batches are served in ARGV order, each exactly as
--              a call of its own for that batch would serve it, one after
--              the other (the same rule, state written in between; one
--              now). Every pair and request is checked before anything is
--              written.
-- The figures an operator reads (admin.Status), in KEYS[4]: "b<l>" and
-- "b<l> <tenant>", "<sum> <at>": the lane's and the tenant's booked
-- durations (µs), decayed by e every 10 s, as of at (Unix µs); and "q<l>
-- <id> <tenant>", "<queued> <since>": a process's requests of the tenant
-- not booked after its last call, the first queued since (Unix µs).
-- then reserve.lua's own arguments. Its reply is unchanged but for seq -3:
-- deferred, with wait_ns the time from now after which to ask again.

local idle_us = 10000000
local max_tenants = 10000

do
  -- The pairs of spec and tenant, each a batch of the call's requests.
  local groups = {}
  local counted = 0
  while true do
    local spec, tenant = ARGV[opi], ARGV[opi + 1]
    local g = {}
    local n
    g.lane, g.weight, g.hmin, g.minshare, g.last, g.grace, g.queued, g.age, g.id, n = string.match(spec or '',
      '^([123]) (%S+) (%S+) (%S+) ([01]) (%S+) (%d+) (%d+) (%S+) (%d+)$')
    if not g.lane then
      g.lane, g.weight, g.hmin, g.minshare, g.last, g.grace, g.queued, g.age, g.id = string.match(spec or '',
        '^([123]) (%S+) (%S+) (%S+) ([01]) (%S+) (%d+) (%d+) (%S+)$')
    end
    g.lane, g.weight, g.hmin, g.minshare, g.grace = tonumber(g.lane), tonumber(g.weight), tonumber(g.hmin), tonumber(g.minshare), tonumber(g.grace)
    g.queued, g.age, g.tenant, n = tonumber(g.queued), tonumber(g.age), tenant, tonumber(n)
    local weight = g.weight
    if not g.lane or not tenant or not weight or weight <= 0 or weight == math.huge or weight ~= weight
        or not finite(g.hmin) or g.hmin < 0 or not finite(g.minshare) or g.minshare < 0 or g.minshare >= 1
        or not finite(g.grace) or g.grace < 0 or not g.queued or not g.age or not g.id or (n and n < 1) then
      return redis.error_reply('PACER_ARG bad fair arguments')
    end
    opi = opi + 2
    groups[#groups + 1] = g
    if not n then
      break
    end
    counted = counted + n
    g.n = counted -- the batch's last request
  end

  local h = KEYS[4]
  -- Every key this call reads or writes is read first, so that one of
  -- another type refuses the call before anything is written; so is every
  -- stored weight.
  local top = 1
  for _, g in ipairs(groups) do
    top = math.max(top, g.lane)
    local lv = redis.pcall('HMGET', h, 'v' .. g.lane)
    local ps = redis.pcall('ZSCORE', KEYS[7 + g.lane], g.tenant)
    if lv.err or (type(ps) == 'table' and ps.err) then
      return redis.error_reply('PACER_WRONGTYPE a fair key holds another type')
    end
    local sw = redis.pcall('HMGET', KEYS[11], g.tenant)
    if sw.err then
      return redis.error_reply('PACER_WRONGTYPE the stored weights key holds another type')
    end
    if sw[1] then
      g.weight = tonumber(sw[1])
      if not g.weight or not (g.weight >= 1e-6 and g.weight <= 1e6) then
        return redis.error_reply('PACER_CONFIG a stored weight is not a number in [1e-6, 1e6]')
      end
    end
  end
  if type(redis.pcall('ZCARD', KEYS[12])) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE a fair key holds another type')
  end
  for l = 1, top do
    if type(redis.pcall('ZCARD', KEYS[4 + l])) == 'table' then
      return redis.error_reply('PACER_WRONGTYPE a fair key holds another type')
    end
  end
  -- A full Redis (maxmemory, noeviction) refuses a script's first write
  -- that may add memory, but lets one that has written already go on, and
  -- this call may drop a lapsed tenant (a removal) before it books: it
  -- asks first. ZADD XX GT -inf changes no member of the sorted set
  -- KEYS[12], so with room it does nothing; a full Redis refuses it, and
  -- the call ends with OOM, nothing written (docs/protocol.md, "A full
  -- Redis").
  redis.call('ZADD', KEYS[12], 'XX', 'GT', '-inf', 'full')
  local now = now_us + now_frac -- Unix µs
  -- The batch being served (load): its tenant, lane and figures, and the
  -- lane's and the tenant's state as read.
  local lane, weight, hmin, minshare, last, grace, queued, age, id, tenant
  local wkey, pkey, ufield, afield, v, pass, entitled_at, due_at, had_due
  local deferred, by_share, kept, late
  local nbooked, booked_d -- the figures
  local function load(g)
    lane, weight, hmin, minshare, last, grace = g.lane, g.weight, g.hmin, g.minshare, g.last, g.grace
    queued, age, id, tenant = g.queued, g.age, g.id, g.tenant
    wkey, pkey = KEYS[4 + lane], KEYS[7 + lane]
    ufield, afield = 'u' .. lane .. ':' .. tenant, 'a' .. lane .. ':' .. tenant
    local lv = redis.call('HMGET', h, 'v' .. lane, 'e' .. lane, afield)
    v = tonumber(lv[1]) or 0
    pass = tonumber(redis.call('ZSCORE', pkey, tenant)) or v
    entitled_at = tonumber(lv[2]) or 0
    due_at = tonumber(lv[3])
    had_due = due_at ~= nil
    deferred, by_share, kept, late = false, false, false, false
    nbooked, booked_d = 0, 0
  end
  load(groups[1])

  -- least_waiting returns the least start of a tenant other than tenant
  -- waiting in lane l, or nil; waiting that lapsed is dropped on the way.
  local function least_waiting(l, skip)
    local key = KEYS[4 + l]
    for _ = 1, 16 do
      local first = redis.call('ZRANGE', key, 0, 1, 'WITHSCORES')
      if #first == 0 then
        return nil
      end
      local found = nil
      for j = 1, #first, 2 do
        local who = first[j]
        local till = tonumber(redis.call('HMGET', h, 'u' .. l .. ':' .. who)[1])
        if not till or till < now then
          redis.call('ZREM', key, who)
          redis.call('HDEL', h, 'u' .. l .. ':' .. who, 'a' .. l .. ':' .. who)
          found = false
          break
        end
        if who ~= skip then
          found = tonumber(first[j + 1])
          break
        end
      end
      if found ~= false then
        return found
      end
    end
    return nil
  end

  fair = {}
  -- counted: the requests the batches before the last take; the last takes
  -- the rest, at least one (reserve.lua checks it).
  fair.counted = counted

  -- gate returns, for a request of cost: true and the most it may wait
  -- (µs; -1: no horizon, the tenant is due), or false and how long to wait
  -- before asking again (µs).
  function fair.gate(cost)
    local d = duration(cost)
    local horizon = 0
    if lane < 3 then
      horizon = math.max(d, hmin)
    end
    local retry = math.max(d, hmin, 1)
    by_share = false
    for l = 1, lane - 1 do
      if least_waiting(l, nil) then
        if minshare > 0 and entitled_at <= now then
          by_share = true
          horizon = math.max(d, hmin)
          break
        end
        due_at = nil
        return false, retry
      end
    end
    -- A lower lane whose minimum share is due goes first.
    for l = lane + 1, 3 do
      local e = tonumber(redis.call('HMGET', h, 'e' .. l)[1])
      if e and e <= now and least_waiting(l, nil) then
        due_at = nil
        return false, retry
      end
    end
    local start = math.max(pass, v)
    local m = least_waiting(lane, tenant)
    if m and start > m + 1e-6 then
      due_at = nil
      return false, retry
    end
    fair.d, fair.start, fair.m = d, start, m
    if due_at and due_at <= now then
      horizon = -1
    end
    fair.h = horizon
    return true, horizon
  end

  -- booked records the request gate admitted as booked.
  function fair.booked()
    nbooked, booked_d, due_at = nbooked + 1, booked_d + fair.d, nil
    pass = fair.start + fair.d / weight
    -- V moves on by the request's duration over the waiting tenants'
    -- number (so that tenants that book once and leave are forgotten), but
    -- never past a waiting tenant's start, nor this one's pass.
    local target = v + fair.d / (weight * math.max(redis.call('ZCARD', wkey), 1))
    if fair.m and fair.m < target then
      target = fair.m
    end
    if fair.start < target then
      target = fair.start -- see finish
    end
    if target > v then
      v = target
    end
    if by_share then
      -- A request's credit every d / m, kept up to one period late (the
      -- lane asks again within a slot interval of being told).
      local period = fair.d / minshare
      entitled_at = math.max(entitled_at, now - period) + period
    end
  end

  -- outlives notes a request deferred by retry µs whose caller waits at
  -- most max_wait µs (-1: no maximum): the tenant waits on only if one of
  -- them outlives its retry (an AllowN refused holds nobody back).
  function fair.outlives(max_wait, retry)
    if max_wait < 0 or retry <= max_wait then
      kept = true
    end
  end

  -- defer records the tenant as waiting, to ask again after retry µs.
  function fair.defer(retry)
    deferred = retry
  end

  -- beyond notes a request in its turn whose slot lies w µs from now,
  -- beyond its maximum wait: beyond the horizon too, it makes the tenant
  -- due (its caller's maximum alone does not).
  function fair.beyond(w)
    if fair.h >= 0 and w > fair.h then
      late = true
    end
  end

  -- The call's keys live as long as its longest-lived batch needs:
  -- finish(true), after the last batch, sets their expiry once, and sweeps
  -- the lapsed figures once.
  local call_ttl = 0
  -- finish writes the lane's and the tenant's state; final: the call's
  -- last batch.
  function fair.finish(final)
    local waiting = (deferred and kept) or last ~= '1'
    if not waiting then
      -- V moves past the start of a tenant that is still waiting only
      -- when it leaves, so that a newcomer starts before a waiting one's
      -- next request, and a tenant that booked and left is forgotten.
      local target = pass
      local m = least_waiting(lane, tenant)
      if m and m < target then
        target = m
      end
      if target > v then
        v = target
      end
    end
    redis.call('HSET', h, 'v' .. lane, string.format('%.17g', v))
    if minshare > 0 then
      redis.call('HSET', h, 'e' .. lane, string.format('%.17g', entitled_at))
    else
      redis.call('HDEL', h, 'e' .. lane)
    end
    if pass > v then
      redis.call('ZADD', pkey, string.format('%.17g', pass), tenant)
    else
      redis.call('ZREM', pkey, tenant)
    end
    redis.call('ZREMRANGEBYSCORE', pkey, '-inf', string.format('%.17g', v))
    -- At most max_tenants passes: the least are dropped (they read as V).
    local over = redis.call('ZCARD', pkey) - max_tenants
    if over > 0 then
      redis.call('ZREM', pkey, unpack(redis.call('ZRANGE', pkey, 0, math.min(over, 1000) - 1)))
    end
    if waiting then
      local till = now + (deferred or 0) + grace
      redis.call('ZADD', wkey, string.format('%.17g', math.max(pass, v)), tenant)
      redis.call('HSET', h, ufield, string.format('%.17g', till))
    else
      redis.call('ZREM', wkey, tenant)
      redis.call('HDEL', h, ufield)
    end
    -- Due from the earliest ask it was told for the horizon, while it
    -- books nothing and waits for no other's turn.
    if waiting and deferred and late then
      redis.call('HSET', h, afield, string.format('%.17g', math.min(due_at or math.huge, now + deferred)))
    elseif had_due and not (waiting and due_at) then
      redis.call('HDEL', h, afield)
    end
    -- The figures: shares decay by e every tau, and lapse after 3 tau; a
    -- process's queue lapses as its waiting does.
    local tau, fx = 10000000, KEYS[12]
    local function add_booked(field)
      local sum, at = string.match(redis.call('HMGET', h, field)[1] or '', '^(%S+) (%S+)$')
      sum, at = tonumber(sum) or 0, tonumber(at) or now
      sum = sum * math.exp(-math.max(now - at, 0) / tau) + booked_d
      redis.call('HSET', h, field, string.format('%.17g %.17g', sum, now))
      redis.call('ZADD', fx, string.format('%.17g', now + 3 * tau), field)
    end
    if booked_d > 0 then
      add_booked('b' .. lane)
      add_booked('b' .. lane .. ' ' .. tenant)
    end
    local qfield = 'q' .. lane .. ' ' .. id .. ' ' .. tenant
    if queued > nbooked then
      redis.call('HSET', h, qfield, string.format('%d %.17g', queued - nbooked, now - age))
      redis.call('ZADD', fx, string.format('%.17g', now + (deferred or 0) + grace), qfield)
    else
      redis.call('HDEL', h, qfield)
      redis.call('ZREM', fx, qfield)
    end
    call_ttl = math.max(call_ttl, math.floor(idle_us / 1000 + (deferred or 0) / 1000 + grace / 1000) + 1)
    if not final then
      return
    end
    local lapsed = redis.call('ZRANGEBYSCORE', fx, '-inf', string.format('%.17g', now), 'LIMIT', 0, 16)
    if #lapsed > 0 then
      redis.call('HDEL', h, unpack(lapsed))
      redis.call('ZREM', fx, unpack(lapsed))
    end
    for k = 4, 10 do
      redis.call('PEXPIRE', KEYS[k], call_ttl)
    end
    redis.call('PEXPIRE', fx, call_ttl)
  end
  -- next is called by reserve.lua before request r: at the first request
  -- of the next batch, this one's state is written (as reserve.lua writes
  -- it after its last request) and the next one's read. (reserve.lua has
  -- read and checked every request before: nothing is written before.)
  local g = 1
  function fair.next(r)
    if groups[g].n and r > groups[g].n then
      if fair.stopped then
        fair.defer(fair.stopped)
      end
      fair.finish(false)
      fair.stopped = nil
      g = g + 1
      load(groups[g])
    end
  end
end
