-- adjust.lua: cancel a reservation, or settle it at its actual cost.
--
-- Cancel gives the costs back as x/time/rate's CancelAt does, band by band:
-- a bucket gets back what later reservations have not already built on,
-- never more than the reservation took nor more than the burst, never once
-- the slot has passed, and never into a pause; a window gets its units back
-- if it is still the latest window and the slot has not passed.
--
-- Settle replaces the costs reserved with the actual ones, unit by unit. A
-- larger actual cost moves each bucket's schedule later by the difference
-- (later reservations pay for it) and adds it to the window, if that is
-- still the latest; a smaller one gives back what later reservations have
-- not built on, under Cancel's rule, whether or not the slot has passed (the
-- call was made at the slot; what it did not use is given back).
--
-- KEYS[1..2], ARGV[1..opi-1]: see core.lua.
-- KEYS[3]  the reservations already adjusted on this key: a string of
--          "<number>@<slot_us>[.<slot_ns>]", space-separated (the last 32),
--          so that an adjustment run twice (a client that resent it)
--          changes nothing the second time; the slot tells a reservation of
--          a state Redis lost from the new state's of the same number
-- KEYS[4]  optional: a hold (claim.lua) to delete with the reservation;
--          or, for a fair request (fair.lua), KEYS[4..7]: the key's fair
--          hash, its lane's passes, the stored weights and its lane's
--          waiting tenants (fair.lua's KEYS[4], [7+l], [11], [4+l])
-- ARGV[opi]   "cancel" or "settle"; "cancel@" or "settle@" when the
--             reservation was made at ARGV[2]'s share (below)
-- ARGV[opi+1] the reservation's slot: integer Unix µs
-- ARGV[opi+2] its sub-µs part in ns (0..999)
-- ARGV[opi+3] its number (reserve.lua's seq), or for a reservation the
--             caller's local fallback granted, an id of its own (no spaces,
--             not all digits): it identifies the reservation in KEYS[3]
-- then one cost per unit as reserved, then (settle) one actual cost per
--          unit, in ARGV[4]'s order (decimal >= 0); then, for a fair
--          request, "<lane> <weight>" and its tenant: its turns count what
--          it cost (below)
-- Reply    {applied, state}: applied 1 when applied, 0 when this
--          reservation was adjusted before; state the key's state as
--          written (or as read when nothing was written; "" if none), which
--          the caller's local fallback starts from if Redis fails
-- Errors   PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG (see core.lua).

-- What comes back is counted at the whole rate's spacing, the least any
-- caller's reservation took per unit: a caller's share may have fallen
-- since its reservation (its view of the fleet now holds members), and at
-- that share's wider spacing a unit would come back as more than it took
-- (TestConformanceAdjustAfterShareFell). A caller that made the
-- reservation at the share it passes now says so ("@"): its units come
-- back at that share's spacing, what they took.
local op, at_share = string.match(ARGV[opi] or '', '^(%a+)(@?)$')
at_share = at_share == '@'
local slot_us, slot_ns, rseq = tonumber(ARGV[opi + 1]), tonumber(ARGV[opi + 2]), ARGV[opi + 3]
local reserved = cost_arg(opi + 4)
local actual = {}
local fi = opi + 4 + nunits -- the fair request's arguments
if op == 'settle' then
  actual = cost_arg(opi + 4 + nunits)
  fi = fi + nunits
elseif op ~= 'cancel' then
  return redis.error_reply('PACER_ARG want cancel or settle')
end
local fair_lane, fair_weight, fair_tenant = nil, nil, nil
if #KEYS == 7 then
  fair_lane, fair_weight = string.match(ARGV[fi] or '', '^([123]) (%S+)$')
  fair_lane, fair_weight, fair_tenant = tonumber(fair_lane), tonumber(fair_weight), ARGV[fi + 1]
  if not fair_lane or not finite(fair_weight) or fair_weight <= 0 or not fair_tenant then
    return redis.error_reply('PACER_ARG bad fair arguments')
  end
  local sw = redis.pcall('HMGET', KEYS[6], fair_tenant)
  local lv = redis.pcall('HMGET', KEYS[4], 'v' .. fair_lane)
  local zc, wc = redis.pcall('ZCARD', KEYS[5]), redis.pcall('ZCARD', KEYS[7])
  if sw.err or lv.err or type(zc) == 'table' or type(wc) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE a fair key holds another type')
  end
  if sw[1] then
    fair_weight = tonumber(sw[1])
    if not fair_weight or not (fair_weight >= 1e-6 and fair_weight <= 1e6) then
      return redis.error_reply('PACER_CONFIG a stored weight is not a number in [1e-6, 1e6]')
    end
  end
end
if not finite(slot_us) or not finite(slot_ns) or not reserved or not actual or not string.match(rseq or '', '^%S+$') or nbands < 1 then
  return redis.error_reply('PACER_ARG bad slot, id or costs')
end

local done = redis.pcall('GET', KEYS[3])
if type(done) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the adjusted-reservations key holds another type')
end
-- A reservation is known by its number and its slot: numbers start again
-- at 1 on a key Redis lost (restarted empty, flushed), and a client may
-- adjust a reservation of the lost state once Redis is back. An entry
-- without a slot is an older version's, known by its number alone.
local id = rseq .. '@' .. ARGV[opi + 1] .. (slot_ns ~= 0 and ('.' .. ARGV[opi + 2]) or '')
local seen = {}
for s in string.gmatch(done or '', '%S+') do
  if s == id or s == rseq then
    return {0, raw or ''}
  end
  seen[#seen + 1] = s
end
-- The slot as the reservation was told it: slots lie on a ns grid
-- (core.lua's grid), so it is exact; less what a resume moved it by.
local slot = (slot_us - now_us) + slot_ns / 1000 - now_frac - resumed(rseq)
local passed = slot < -same_us
-- A reservation numbered after the state's last was not granted by this
-- state: Redis lost the one that did (restarted empty, a replica promoted
-- before it had the latest writes), as core.lua tells a lost key by its
-- numbers. What it took was never charged here, so nothing comes back: its
-- slot, read against this state's queue, made it this state's last
-- reservation, and a unit came back that this state's own last slot had
-- taken (TestCancelOfLostReservationGivesNothing). A raise is still
-- charged: it costs capacity, never adds any.
local rnum = tonumber(rseq) -- nil: a local grant's id
local lost_rsv = rnum ~= nil and rnum > seq
local changed = false
for i = 1, nbands do
    local b = bands[i]
  local c = reserved[b.unit] or 0
  local a = actual[b.unit]
  local d -- the change: negative gives back
  if op == 'cancel' then
    if not passed and not lost_rsv then
      d = -c
    end
  elseif a and not (lost_rsv and a < c) then
    d = a - c
  end
  if d and d ~= 0 and b.bucket then
    if d > 0 then
      b.z = b.z + d * b.upp
    else
      -- Units reserved after this reservation (their slots lie between ours
      -- and the last event) are not given back. Both slots sit on the ns
      -- grid, each up to 1 ns after its exact time, so unless they are the
      -- same slot their distance is counted 1 ns longer: a cancel never
      -- gives back more than its exact share (it would otherwise, by up to
      -- 1 ns of rate each time, and many cancels add up). The units built
      -- on are counted at the whole rate's spacing, whatever this caller's
      -- share: a later reservation of a caller at the whole rate builds on
      -- more than one at a share's longer spacing, and counted at that one
      -- a cancel gave back time the whole-rate caller then took again.
      local gap = b.e - slot
      if gap >= same_us then
        gap = gap + 0.001
      end
      local back = c - gap * b.rate / 1000000
      if back > -d then
        back = -d
      end
      if gap < -(0.001 + same_us) and rnum then
        -- Beyond the band's last event (by more than the ns the slot told
        -- is rounded up by, the grid), which no reservation of this state
        -- can lie after (charge never moves it back; a cancel of the last
        -- reservation moves it back past that one only): a reservation of a
        -- state Redis lost, numbered as one of this state's now. Nothing
        -- comes back (TestCancelBeyondLastEventGivesNothing). A local
        -- grant (an id, not a number) lies at or before the floor its
        -- handback gave, which is the last event from then on
        -- (reserve.lua).
        back = 0
      end
      if back > 0 then
        -- At the whole rate's spacing, or the share's ("@": see op).
        local upw = at_share and b.upp or 1000000 / b.rate
        local tokens = -b.z / b.upp + back * upw / b.upp
        if tokens > b.eff then
          tokens = b.eff -- the burst at the share
        end
        local z = -tokens * b.upp
        if pause > 0 and z < pause then
          z = pause -- never into a pause
        end
        b.z = z
        -- A cancel of the last reservation moves the last event back to
        -- the one before it, as long as that has not passed. The last event
        -- is kept exact, and the slot told is it rounded up to the ns grid
        -- (core.lua's grid): the reservation is the last if its slot lies
        -- within a ns after the last event (and half a ns of float noise
        -- either side). The one before is counted from the exact time, and
        -- never before the bucket's bound (core.lua's take, "~e": the previous
        -- last event, when this one's slot was set by more than its cost).
        local off = slot - b.e
        if op == 'cancel' and off > -same_us and off < 0.001 + same_us then
          local prev = b.e - c * upw
          if b.eb and prev < b.eb then
            prev = b.eb
          end
          if prev >= -same_us then
            b.e = math.max(prev, 0)
          end
        end
      end
    end
    changed = true
  elseif d and d ~= 0 then
    local w = win_of(b, slot)
    if w == b.w and w >= b.cur then
      b.u = math.max(0, b.u + d)
      changed = true
    end
  end
end
local state = raw or ''
if changed then
  state = save()
end
-- The reservation is adjusted: recorded before any removal below (the
-- hold's, a tenant's pass), since a full Redis (maxmemory, noeviction)
-- refuses a script's first write that may add memory but lets one that
-- has written already go on: this SET, or the state's, comes first, and a
-- full Redis refuses the call whole (docs/protocol.md, "A full Redis").
seen[#seen + 1] = id
while #seen > 32 do
  table.remove(seen, 1)
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 1000 then
  ttl = 1000
end
redis.call('SET', KEYS[3], table.concat(seen, ' '), 'PX', ttl)
if #KEYS == 4 then
  redis.call('DEL', KEYS[4])
end
-- A fair request's turns count what it cost: its tenant's pass (fair.lua)
-- moves by the difference between its duration at the actual cost and at
-- the cost it was booked for, over its weight; a cancel before the slot
-- gives the whole booking back. A pass at or below the lane's virtual time
-- is forgotten (it reads as V), and a waiting tenant's start moves with it.
if fair_lane then
  local d = 0
  if op == 'settle' then
    local act = {}
    for u = 1, nunits do
      act[u] = actual[u] or reserved[u]
    end
    d = duration(act) - duration(reserved)
  elseif not passed then
    d = -duration(reserved)
  end
  if d ~= 0 then
    local v = tonumber(redis.call('HMGET', KEYS[4], 'v' .. fair_lane)[1]) or 0
    local p = tonumber(redis.call('ZSCORE', KEYS[5], fair_tenant)) or v
    p = p + d / fair_weight
    if p > v then
      redis.call('ZADD', KEYS[5], string.format('%.17g', p), fair_tenant)
      if redis.call('PTTL', KEYS[5]) < 0 then
        redis.call('PEXPIRE', KEYS[5], 10000)
      end
    else
      redis.call('ZREM', KEYS[5], fair_tenant)
    end
    if redis.call('ZSCORE', KEYS[7], fair_tenant) then
      redis.call('ZADD', KEYS[7], string.format('%.17g', math.max(p, v)), fair_tenant)
    end
  end
end
return {1, state}
