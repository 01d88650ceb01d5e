-- claim.lua: hand a holder (a job, by its ID) the slot held for it, or a
-- fresh one; a slot too far away is kept for the holder or refused.
--
-- A hold is a slot reserved for one holder and recorded under its ID, so the
-- holder redeems it later instead of reserving a second slot (a job
-- rescheduled to its slot, or enqueued for it by hold.lua). A hold more than
-- stale_us in the past (its holder was not there to use it), or lying inside
-- a pause made after it was granted, is dropped and a fresh slot taken
-- instead: a backlog drains at the rate, and nobody fires into a pause.
--
-- KEYS[1..2], ARGV[1..opi-1]: see core.lua.
-- KEYS[3]  the holder's hold, a string in the key group's hash tag:
--          "<slot_us> <slot_ns> <seq> <cost>..." (the slot, the reservation's
--          number and its costs, one per unit). It expires stale_us after
--          its slot.
-- ARGV[opi]    max_wait_us: integer µs >= 0. A slot at most this far away
--              is handed over (the hold, if any, is deleted).
-- ARGV[opi+1]  "1": a slot further away is kept for the holder (a fresh one
--              is reserved and recorded; an existing hold stays). "0": it is
--              refused: nothing is reserved, an existing hold stays.
-- ARGV[opi+2]  stale_us: integer µs >= 0 (see above); also the hold's time
--              to live after its slot
-- ARGV[opi+3]  early_us: integer µs >= 0: a held slot at most
--              max(max_wait_us, early_us) away is handed over (a holder that
--              a job queue brings back early on purpose sleeps the rest)
-- then one cost per unit, for a fresh slot
-- Reply    reserve.lua's layout for one request (now_us, now_ns, wait_ns,
--          seq; wait_ns may be negative for a hold redeemed a little late),
--          then:
--            state   1 handed over, 2 kept for the holder (who comes back
--                    for it), 0 refused (seq 0, or -1 for a queue over 30
--                    years)
--            origin  0 a fresh slot, 1 the hold, 2 fresh after dropping a
--                    stale hold, 3 fresh after dropping a hold inside a pause
--            then the slot's costs, one per unit
-- Errors   PACER_ARG, PACER_EXCEEDS, PACER_WRONGTYPE, PACER_CONFIG.

-- slot_text returns the slot tell(s) from now as "slot_us slot_ns": the same
-- instant as a reply's now_us, now_ns + wait_ns, in integer Unix µs and ns.
local function slot_text(s)
  local q = now_ns + tell(s)
  return string.format('%d %d', now_us + math.floor(q / 1000), q % 1000)
end

local max_wait, may_keep = tonumber(ARGV[opi]), ARGV[opi + 1] == '1'
local stale, early = tonumber(ARGV[opi + 2]), tonumber(ARGV[opi + 3])
local cost = cost_arg(opi + 4)
if nbands < 1 or not finite(max_wait) or max_wait < 0 or not finite(stale) or stale < 0 or not finite(early) or early < 0 or not cost then
  return redis.error_reply('PACER_ARG want max_wait_us, keep, stale_us, early_us (>= 0) and costs')
end
if not fits(cost) then
  return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
end

local h = redis.pcall('GET', KEYS[3])
if type(h) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the hold key holds another type')
end
local origin = 0
if h then
  local f = {}
  for x in string.gmatch(h, '%S+') do
    f[#f + 1] = x
  end
  local s = (tonumber(f[1]) - now_us) + tonumber(f[2]) / 1000 - now_frac - resumed(f[3])
  if s < -stale then
    origin = 2
  elseif pause > 0 and pause > s + same_us then
    origin = 3
  else
    local out = {now_us, now_ns, tell(s), tonumber(f[3]), 0, 1}
    for u = 1, nunits do
      out[6 + u] = f[3 + u] or '0'
    end
    if tell(s) <= max_wait * 1000 or s <= early then
      redis.call('DEL', KEYS[3])
      out[5] = 1
    elseif may_keep then
      out[5] = 2
    else
      out[4] = 0
    end
    return out
  end
end

-- The hold, stale or behind a pause, goes (origin 2 or 3): after the
-- state's write when a slot is taken, since a full Redis (maxmemory,
-- noeviction) refuses a script's first write that may add memory but lets
-- one that has written already go on, so that a full Redis refuses the
-- call whole (docs/protocol.md, "A full Redis"); alone, when none is.
local function unhold()
  if h then
    redis.call('DEL', KEYS[3])
  end
end
local s, idx, exact = earliest(pause, cost)
local out = {now_us, now_ns, s and tell(s) or 0, 0, 0, origin}
for u = 1, nunits do
  out[6 + u] = ARGV[opi + 3 + u]
end
if not s or s > max_queue_us then
  out[3], out[4] = 0, s and -1 or -2
  unhold()
  return out
end
if out[3] > max_wait * 1000 and not may_keep then
  unhold()
  return out
end
take(s, cost, idx, exact)
seq = seq + 1
save()
out[4] = seq
if out[3] <= max_wait * 1000 then
  out[5] = 1
  unhold()
  return out
end
out[5] = 2
local rec = slot_text(s) .. string.format(' %d', seq)
for u = 1, nunits do
  rec = rec .. ' ' .. ARGV[opi + 3 + u]
end
redis.call('SET', KEYS[3], rec, 'PX', math.ceil((s + stale) / 1000) + 1)
return out
