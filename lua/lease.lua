-- lease.lua: reserve a run of k consecutive one-unit slots on a hot key in
-- one call, O(1) whatever k: the run is exactly the slots k reserve.lua
-- requests of cost c, one after the other, would have been granted, and
-- the key's state (its bucket, last event and seq) is left as they would
-- have left it. reserve's lease.go hands the slots out locally.
--
-- Leasable only when that is exact and simple: the policy in force is one
-- token bucket (no window band, no second band), no limit is stored for
-- the key (KEYS[2] absent: neither enforced nor in shadow mode), and the
-- slots do not lie on the fleet's lattice (members held, a burst under the
-- fleet's size: each unit slot then snaps to an instant of a rank not held,
-- which one charge for the run would not keep). Otherwise the reply says
-- "not leasable" and nothing is written; the caller takes the normal path.
--
-- Why it is exact: with one bucket of spacing u = c * upp (µs), z0 its zero
-- time and P the earliest slot allowed (the pause, or now), let
-- Z = max(z0, P - fill). Each unit reservation i = 1..k is charged at
-- max(P, Z + i*u) and gets the slot grid(max(P, Z + i*u)); after the k-th,
-- z = Z + k*u (core.lua's earliest and take, by induction, as u <= fill).
-- So the first k-1 are taken in one charge of (k-1)*c at the first slot's
-- exact time (take: max(z0, s1 - fill) = Z), and the k-th the usual way,
-- which sets the last event to the last slot.
--
-- KEYS, ARGV[1..opi-1]: see core.lua (KEYS[2] is read here, not through
--              core.lua's own read: a stored limit refuses the lease).
-- ARGV[opi]    k, the number of slots wanted (integer >= 2)
-- ARGV[opi+1]  c, the cost of each slot (decimal > 0, at most the burst)
--              (A lost key's horizon is ARGV[2]'s "!": core.lua.)
-- Reply        flat array: now_us, now_ns (as in reserve.lua), then
--                k        the slots granted (k as asked), or 0: not leasable
--                seq      the number of the first (the i-th is seq + i - 1),
--                         or when k is 0 why not: 1 another policy shape, a
--                         stored limit or the fleet's lattice, 2 the queue
--                         would be over 30 years
--                first_ns integer ns from now to the first slot
--                last_ns  integer ns from now to the k-th slot
--                x        the k-th slot's exact time, ns after now_us, and
--                step     the spacing u in ns, both decimal strings: the
--                         i-th slot is now_us*1000 + ceil(x - (k-i)*step),
--                         ignoring float noise under 1e-3 ns (core.lua's
--                         grid), never before the first
--                state    the key's state as written ("" when k is 0):
--                         its pause and resume records stand for the pause
--                         check a sleeper would otherwise read
-- Errors       PACER_ARG, PACER_EXCEEDS, PACER_WRONGTYPE, PACER_CONFIG.

local k = tonumber(ARGV[opi])
local cost = cost_arg(opi + 1)
if not finite(k) or k < 2 or k ~= math.floor(k) or not cost or #ARGV ~= opi + 1 or nunits ~= 1 or cost[1] <= 0 then
  return redis.error_reply('PACER_ARG want k (integer >= 2) and one cost > 0')
end
if not fits(cost) then
  return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
end
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the stored limit key holds another type')
end
if nbands ~= 1 or not bands[1].bucket or stored or lattice then
  return {now_us, now_ns, 0, 1, 0, 0, '0', '0', ''}
end

local q1, idx1, s1 = earliest(pause, cost)
if not q1 or q1 > max_queue_us then
  return {now_us, now_ns, 0, 2, 0, 0, '0', '0', ''}
end
local first = tell(q1)
local bulk = {}
bulk[1] = (k - 1) * cost[1]
take(q1, bulk, idx1, s1)
local qk, idxk, sk = earliest(pause, cost)
take(qk, cost, idxk, sk)
local seq0 = seq + 1
seq = seq + k
local state = save()
return {now_us, now_ns, k, seq0, first, tell(qk),
  string.format('%.17g', (sk + now_frac) * 1000), string.format('%.17g', bands[1].upp * cost[1] * 1000), state}
