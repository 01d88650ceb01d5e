-- hold.lua: reserve a slot for each of several holders (jobs, by ID) in one
-- call, in order, and record each under its holder so that claim.lua hands
-- it over later. A holder that already has a live hold keeps it (the call
-- can be repeated after a partial failure without reserving twice); a hold
-- that is stale or inside a pause is replaced by a fresh slot (claim.lua).
--
-- KEYS[1..2], ARGV[1..opi-1]: see core.lua.
-- KEYS[3..m+2]  one hold per holder (see claim.lua), in the key group's tag
-- ARGV[opi]    stale_us: integer µs >= 0, each hold's time to live after its
--              slot
-- ARGV[opi+1]  not_before_us: integer µs >= 0: no fresh slot before now +
--              this (a job queue picks due jobs up about this late)
-- ARGV[opi+2]  m, the number of holders
-- then per holder one cost per unit
-- Reply    reserve.lua's layout for m requests (every granted slot is kept
--          for its holder; seq -1: refused, the queue would be over 30 years
--          long, and so is every later holder), then per holder: origin (see
--          claim.lua) and the slot's costs, one per unit
-- Errors   PACER_ARG, PACER_EXCEEDS, PACER_WRONGTYPE, PACER_CONFIG.

-- slot_text returns the slot tell(s) from now as "slot_us slot_ns": the same
-- instant as a reply's now_us, now_ns + wait_ns, in integer Unix µs and ns.
local function slot_text(s)
  local q = now_ns + tell(s)
  return string.format('%d %d', now_us + math.floor(q / 1000), q % 1000)
end

local stale, not_before, m = tonumber(ARGV[opi]), tonumber(ARGV[opi + 1]), tonumber(ARGV[opi + 2])
if nbands < 1 or not finite(stale) or stale < 0 or not finite(not_before) or not_before < 0 or not finite(m) or m < 1 or #KEYS ~= m + 2
    or #ARGV ~= opi + 2 + m * nunits then
  return redis.error_reply('PACER_ARG want stale_us, not_before_us, m, then one cost per unit for each of m holders')
end
local costs = {}
for i = 1, m do
  costs[i] = cost_arg(opi + 3 + (i - 1) * nunits)
  if not costs[i] then
    return redis.error_reply('PACER_ARG bad cost')
  end
  if not fits(costs[i]) then
    return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
  end
end
-- Read every hold before writing anything: GET fails on a key of another
-- type, and a script is not rolled back.
local holds = {}
for i = 1, m do
  local h = redis.pcall('GET', KEYS[2 + i])
  if type(h) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE a hold key holds another type')
  end
  holds[i] = h
end

local out = {now_us, now_ns}
local tail = {}
local start = pause
if not_before > start then
  start = not_before
end
local granted, refused = false, false
for i = 1, m do
  local h, origin, kept = holds[i], 0, nil
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
      kept = f
      out[2 * i + 1], out[2 * i + 2] = tell(s), tonumber(f[3])
      tail[#tail + 1] = 1
      for u = 1, nunits do
        tail[#tail + 1] = f[3 + u] or '0'
      end
    end
  end
  if not kept then
    local s, idx, exact = earliest(start, costs[i])
    if refused or not s or s > max_queue_us then
      out[2 * i + 1], out[2 * i + 2] = 0, (refused or s) and -1 or -2
      refused = true
    else
      take(s, costs[i], idx, exact)
      seq = seq + 1
      granted = true
      out[2 * i + 1], out[2 * i + 2] = tell(s), seq
      local rec = slot_text(s) .. string.format(' %d', seq)
      for u = 1, nunits do
        rec = rec .. ' ' .. ARGV[opi + 2 + (i - 1) * nunits + u]
      end
      redis.call('SET', KEYS[2 + i], rec, 'PX', math.ceil((s + stale) / 1000) + 1)
    end
    tail[#tail + 1] = origin
    for u = 1, nunits do
      tail[#tail + 1] = ARGV[opi + 2 + (i - 1) * nunits + u]
    end
  end
end
if granted then
  save()
end
for _, v in ipairs(tail) do
  out[#out + 1] = v
end
return out
