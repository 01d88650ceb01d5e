-- reserve.lua: reserve slots for one or more requests on one key group,
-- first come first served: the requests are served in ARGV order, each
-- exactly as if it were a call of its own, so a batch of m requests gives
-- the same slots as m calls one after the other. Each request gets one slot,
-- the earliest at which every band allows its costs. A request that would
-- wait too long is refused and changes nothing; the ones after it still run.
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- ARGV[opi]    floor: "" or "<h> [<band>:<w>:<u> ...]": what this caller's
--              local fallback granted while Redis was unavailable, applied
--              before the requests: every bucket's balance is at most zero
--              at now + h (integer µs), and each named window band's window
--              w gets u more units: added if w is its latest window, the
--              latest with u units if w is later (first come, first served:
--              nothing is granted into a window before the latest), nothing
--              if w is earlier. Windows of one band come in ascending order.
--              With a pause in force, now + h also counts as granted before
--              it ("~p"), so a resume moves nothing onto the local slots.
--              A last word "!<h2>[:<seq>]" (integer µs; the number of
--              the last reservation the caller saw) is a horizon for a key
--              Redis has lost: when the key has no state (it restarted
--              empty), or a state numbered before seq (one rebuilt since,
--              or a replica's that missed the latest writes), every
--              bucket's balance is at most zero at now + h2 too (the slots
--              Redis granted before it forgot them: core.lua's
--              lost_horizon). It may come alone: the floor "!<h2>[:<seq>]"
--              floors nothing else, and writes nothing to a key it does
--              not apply to (a caller with slots still ahead sends it with
--              every call).
-- ARGV[opi+1]  m, the number of requests (integer >= 1; 0 with a floor:
--              the floor alone)
-- then per request: max_wait_us (integer µs; -1: no maximum), then one cost
--              per unit (decimal >= 0), in ARGV[4]'s order.
-- Reply        flat array: now_us, now_ns (the time waits count from, in
--              integer Unix µs and 0..999 ns), then two entries per request,
--              in ARGV order (the layout of every script that grants slots),
--              then the key's state as written (or as read when nothing was
--              written; "" if none) and its stored limit ("" if none), which
--              the caller's local fallback starts from if Redis fails, and
--              last the binding bands: one word per request, in ARGV order,
--              separated by spaces, naming what set its slot (or its
--              refused wait): a band's name (of the bands in force: a
--              stored limit's among them), "~p" for a pause, "~" for
--              nothing (the slot is now, or no slot was computed).
--              The two entries per request:
--                wait_ns  integer ns from now to the slot, rounded up; when
--                         refused, the wait it would have needed
--                seq      the reservation's number on the key (> 0) when
--                         granted; 0 when refused because its wait would be
--                         longer than its maximum; -1 when refused because
--                         the queue would be over 30 years long
--                         (reserve.ErrQueueTooLong); -2 when refused because
--                         a window band can never take the cost at the share
--                         (its N_k below the cost in every window); -3,
--                         in the fair script only (fair.lua), deferred:
--                         nothing booked, wait_ns being when to ask again
-- Errors       PACER_ARG, PACER_EXCEEDS (a cost above a band's burst or N:
--              it could never be granted), PACER_WRONGTYPE, PACER_CONFIG.
--
-- KEYS[3]      the shadow figures, a string, written only while a stored
--              limit is in shadow mode (KEYS[2]): "1 <t> <calls> <delayed>
--              <wait_sum_us> <max_wait_us>" then the stored limit's band
--              records as in a format 1 state (KEYS[1]), times in ns
--              relative to t (Unix µs).
--              Each request granted is also reserved on the stored limit's
--              own schedule, which is never enforced: calls counts them,
--              delayed those that would have waited, and the waits they
--              would have had (from the time of the call; pauses aside).

local floor = ARGV[opi]
local m = ARGV[opi + 1]
if m == '1' then
  m = 1
else
  m = tonumber(m)
end
local width = 1 + nunits
if nbands < 1 or not m or m < 0 or (m == 0 and floor == '') or #ARGV ~= opi + 1 + m * width then
  return redis.error_reply('PACER_ARG want floor, m, then max_wait_us and one cost per unit for each of m requests')
end

local floor_writes = false -- whether the floor changes the state
if floor ~= '' then
  local h, more = string.match(floor, '^(%-?%d+)(.*)$')
  h = tonumber(h)
  if not h and string.byte(floor, 1) == 33 then -- '!': a lost key's horizon alone
    more = ' ' .. floor
  elseif not h then
    return redis.error_reply('PACER_ARG bad floor')
  else
    floor_writes = true
  end
  if h then
    for i = 1, nbands do
      local b = bands[i]
      if b.bucket and b.z < h then
        b.z = h
      end
    end
    -- The local slots were granted before any resume: one moves the
    -- reservations granted during the pause to after them, not onto them.
    if mark_p and mark_p.e < h then
      mark_p.e = h
    end
  end
  local lost = string.match(more, ' (!%S+)$')
  if lost then
    local ok, applied = lost_horizon(lost)
    if not ok then
      return redis.error_reply('PACER_ARG bad floor')
    end
    floor_writes = floor_writes or applied
  end
  for name, w, u in string.gmatch(more, ' ([^:%s!]+):(%-?%d+):(%S+)') do
    w, u = tonumber(w), tonumber(u)
    for i = 1, nbands do
      local b = bands[i]
      -- Local grants lie at or before the horizon: a later window was
      -- numbered for another definition of the band (a stored limit
      -- changed meanwhile), and is not applied.
      if b.name == name and not b.bucket and w and u and w <= win_of(b, h) then
        if w > b.w then
          b.w, b.u = w, u
        elseif w == b.w then
          b.u = b.u + u
        end
        b.rec = true
      end
    end
  end
end

-- The shadow figures are read before anything is written: a shadow key of
-- another type refuses the call, reserving nothing.
local shadow_raw = nil
if shadow_bands then
  shadow_raw = redis.pcall('GET', KEYS[3])
  if type(shadow_raw) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE the shadow key holds another type')
  end
end

local out = {now_us, now_ns}
local bys = {} -- each request's binding band (earliest)
local granted = false
local shadow_costs = nil -- the costs granted, while a stored limit is in shadow mode
local i = opi + 2
for r = 1, m do
  local max_wait, cost = ARGV[i], cost_arg(i + 1)
  if max_wait == '-1' then
    max_wait = -1
  else
    max_wait = tonumber(max_wait)
  end
  if not max_wait or max_wait ~= max_wait or max_wait == math.huge or (max_wait < 0 and max_wait ~= -1) or not cost then
    return redis.error_reply('PACER_ARG bad max_wait_us or cost')
  end
  local caller_max = max_wait
  if not fits(cost) then
    return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
  end
  i = i + width
  local turn, retry = true, 0
  if fair then
    if fair.stopped then
      turn, retry = false, fair.stopped
    else
      local h
      turn, h = fair.gate(cost)
      if not turn then
        retry = h
      elseif max_wait < 0 or h < max_wait then
        max_wait = h -- the booking horizon, or the caller's maximum if shorter
      end
    end
  end
  local s, idx, exact, by = nil, nil, nil, 0
  if turn then
    s, idx, exact, by = earliest(pause, cost)
  end
  if not s or by == 0 then
    bys[r] = '~'
  elseif by < 0 then
    bys[r] = '~p'
  else
    bys[r] = bands[by].name
  end
  local w = s and tell(s)
  if not turn then
    -- fair.lua: not this tenant's turn; neither it nor the rest of the
    -- batch is booked.
    fair.stopped = retry
    fair.outlives(caller_max, retry)
    out[2 * r + 1], out[2 * r + 2] = math.ceil(retry * 1000), -3
  elseif not s then
    out[2 * r + 1], out[2 * r + 2] = 0, -2
  elseif s > max_queue_us then
    out[2 * r + 1], out[2 * r + 2] = 0, -1
  elseif max_wait >= 0 and w > max_wait * 1000 then
    if fair then
      -- Beyond the booking horizon: ask again when the slot is within it.
      fair.stopped = math.max(w / 1000 - max_wait, 1)
      fair.outlives(caller_max, fair.stopped)
      out[2 * r + 1], out[2 * r + 2] = math.ceil(fair.stopped * 1000), -3
    else
      out[2 * r + 1], out[2 * r + 2] = w, 0
    end
  else
    if fair then
      fair.booked()
    end
    take(s, cost, idx, exact)
    seq = seq + 1
    granted = true
    out[2 * r + 1], out[2 * r + 2] = w, seq
    if shadow_bands then
      shadow_costs = shadow_costs or {}
      shadow_costs[#shadow_costs + 1] = cost
    end
  end
end
if fair then
  if fair.stopped then
    fair.defer(fair.stopped)
  end
  fair.finish()
end
local state = raw or ''
if granted or floor_writes then
  state = save()
end
if shadow_costs then
  local sh = shadow_raw
  local calls, delayed, wait_sum, wait_max = 0, 0, 0, 0
  if sh then
    local t, a, b, c, d, recs = string.match(sh, '^1 (%d+) (%d+) (%d+) ([%d.]+) ([%d.]+)(.*)$')
    if t then
      calls, delayed, wait_sum, wait_max = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
      load_records(recs, shadow_bands, tonumber(t) - now_us - now_frac, nil, true)
    end
  end
  local real, nreal = bands, nbands
  bands, nbands = shadow_bands, #shadow_bands
  for _, cost in ipairs(shadow_costs) do
    local q, idx, exact = earliest(0, cost)
    if not q then
      break
    end
    take(q, cost, idx, exact)
    local wait = math.max(0, q)
    calls = calls + 1
    if wait > 0.5 then
      delayed = delayed + 1
    end
    wait_sum = wait_sum + wait
    if wait > wait_max then
      wait_max = wait
    end
  end
  -- The shadow's band records, as a format 1 state's.
  local text = ''
  for j = 1, nbands do
    local b = bands[j]
    if b.bucket then
      text = text .. string.format(' %s %.3f %.3f', b.name, (b.z + now_frac) * 1000, (b.e + now_frac) * 1000)
    else
      text = text .. string.format(' %s %d %.17g', b.name, b.w, b.u)
    end
  end
  bands, nbands = real, nreal
  redis.call('SET', KEYS[3], string.format('1 %d %d %d %.3f %.3f', now_us, calls, delayed, wait_sum, wait_max) .. text)
end
out[#out + 1] = state
out[#out + 1] = stored_text
out[#out + 1] = table.concat(bys, ' ')
return out
