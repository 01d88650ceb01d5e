-- reserve.lua: reserve slots for one or more requests on one key group,
-- first come first served: the requests are served in ARGV order, each
-- exactly as if it were a call of its own, so a batch of m requests gives
-- the same slots as m calls one after the other. Each request gets one slot,
-- the earliest at which every band allows its costs. A request that would
-- wait too long is refused and changes nothing; the ones after it still run.
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- ARGV[opi]    floor (optional: "" if absent): "" or "<h> [<band>:<w>:<u>
--              ...][ *]", or "*" alone: what this caller's
--              local fallback granted while Redis was unavailable, applied
--              before the requests: every bucket's balance is at most zero
--              at now + h (integer µs), and each named window band's window
--              w gets u more units: added if w is its latest window, the
--              latest with u units if w is later (first come, first served:
--              nothing is granted into a window before the latest), nothing
--              if w is earlier. Windows of one band come in ascending order.
--              With a pause in force, now + h also counts as granted before
--              it ("~p"), so a resume moves nothing onto the local slots.
--              (A lost key's horizon is ARGV[2]'s "!": core.lua.)
--              A last " *" (or "*" alone, with no horizon) counts, in
--              every window band's window current at now, what the others
--              may have taken of it since the state was written, after the
--              windows above: its N, or, when a bucket band charges the
--              same unit, at most what that bucket can grant in the window
--              from the state's time (its burst and its whole rate, from
--              the balance the state shows; with no state, from the
--              window's start). A member
--              that starts pacing locally in the middle of a window cannot
--              know what the fleet took of it on Redis since.
-- ARGV[opi+1]  the requests (optional: "" if absent): "" for one request of
--              cost 1 on every unit with no maximum wait (the common case);
--              "<m>", m >= 2 (up to four digits), for m such requests;
--              "0" for none (a floor alone, which must then be given, or a
--              lost horizon in ARGV[2]); else for each
--              request, as struct "<d" numbers (8 bytes each, little-
--              endian doubles): max_wait_us (µs; -1: no maximum), then one
--              cost per unit (>= 0), in the policy's order of units. The
--              requests are checked, all of them, before anything is
--              written.
-- Reply        one string, struct "<I7HI4": now_us, now_ns (the time waits
--              count from, in integer Unix µs and 0..999 ns) and m, the
--              number of requests; then per request, in ARGV order,
--              "<i8i8": wait_ns and seq (below); then "<I4" and that many
--              bytes, the key's state as written (or as read when nothing
--              was written; empty if none), and the same for its stored
--              limit (empty if none), which the caller's local fallback
--              starts from if Redis fails; and last, to the end, the
--              binding bands: one word per request, in ARGV order,
--              separated by spaces, naming what set its slot (or its
--              refused wait): a band's name (of the bands in force: a
--              stored limit's among them), "~p" for a pause, "~" for
--              nothing (the slot is now, or no slot was computed).
--              Per request:
--                wait_ns  integer ns from now to the slot, rounded up; when
--                         refused, the wait it would have needed
--                seq      the reservation's number on the key (> 0) when
--                         granted; 0 when refused because its wait would be
--                         longer than its maximum; -1 when refused because
--                         the queue would be over 30 years long
--                         (reserve.ErrQueueTooLong); -2 when refused because
--                         a band can never take the cost at the share (a
--                         window's N_k below the cost in every window, or,
--                         at a member's share, a bucket's B_k below it);
--                         -3,
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

local floor = ARGV[opi] or ''
local reqs = ARGV[opi + 1] or ''
if nbands < 1 or #ARGV > opi + 1 then
  return redis.error_reply('PACER_ARG want the floor and the requests')
end
-- The requests: their maximum waits (-1: none) and costs (by unit), all
-- read and checked before anything is written (a fair call writes between
-- its batches).
local m, waits, costs = 1, nil, nil
local ones = {}
for u = 1, nunits do
  ones[u] = 1
end
local plain = #reqs <= 4 and string.match(reqs, '^%d+$') and tonumber(reqs)
if reqs == '0' then
  m = 0
elseif plain and plain >= 2 and plain == math.floor(plain) then
  m = plain -- m plain requests: cost 1 on every unit, no maximum wait
elseif reqs ~= '' then
  local width = 8 * (1 + nunits)
  m = #reqs / width
  if m < 1 or m ~= math.floor(m) then
    return redis.error_reply('PACER_ARG bad requests')
  end
  waits, costs = {}, {}
  local pos = 1
  for r = 1, m do
    local w = struct.unpack('<d', reqs, pos)
    if w ~= w or w == math.huge or (w < 0 and w ~= -1) then
      return redis.error_reply('PACER_ARG bad max_wait_us or cost')
    end
    local cost = {}
    for u = 1, nunits do
      local c = struct.unpack('<d', reqs, pos + 8 * u)
      if c ~= c or c == math.huge or c < 0 then
        return redis.error_reply('PACER_ARG bad max_wait_us or cost')
      end
      cost[u] = c
    end
    waits[r], costs[r] = w, cost
    pos = pos + width
  end
end
if m == 0 and floor == '' and not lost_h2 then
  return redis.error_reply('PACER_ARG want the floor and the requests')
end
if fair and m <= fair.counted then
  return redis.error_reply('PACER_ARG bad fair arguments')
end
-- A cost above a band's burst or N could never be granted (tools.lua's
-- fits).
for r = 1, m do
  local cost = costs and costs[r] or ones
  for i = 1, nbands do
    local b = bands[i]
    if (cost[b.unit] or 0) > b.burst + 1e-9 then
      return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
    end
  end
end

local floor_writes = lost_applied -- whether the floor (or a lost horizon) changes the state
local close_now = false
if floor == '*' then
  close_now, floor_writes = true, true
elseif floor ~= '' then
  local h, more = string.match(floor, '^(%-?%d+)(.*)$')
  h = tonumber(h)
  if not h then
    return redis.error_reply('PACER_ARG bad floor')
  end
  if string.sub(more, -2) == ' *' then
    close_now, more = true, string.sub(more, 1, -3)
  end
  floor_writes = true
  for i = 1, nbands do
    local b = bands[i]
    if b.bucket and b.z < h then
      b.z0, b.z = b.z, h -- z0: the balance the state showed (close_now)
    end
    if b.bucket and b.e < h then
      -- The last local slot is the key's last event: a cancel of a local
      -- grant (adjust.lua) gives back only what the local grants after it
      -- have not built on. Before, the last event stayed Redis's own, and
      -- a cancel of any local grant gave its whole unit back, so that the
      -- next slot fell on the last local one, still live
      -- (TestLocalCancelAfterHandback).
      b.e = h
    end
  end
  -- The local slots were granted before any resume: one moves the
  -- reservations granted during the pause to after them, not onto them.
  if mark_p and mark_p.e < h then
    mark_p.e = h
  end
  for name, w, u in string.gmatch(more, ' ([^:%s]+):(%-?%d+):(%S+)') do
    w, u = tonumber(w), tonumber(u)
    for i = 1, nbands do
      local b = bands[i]
      -- Local grants lie at or before the horizon: a later window was
      -- numbered for another definition of the band (a stored limit
      -- changed meanwhile), and is not applied.
      if b.name == name and not b.bucket and w and u and w <= win_of(b, h) then
        -- Granted before any resume: the pause's queue moves into no
        -- window holding them.
        if mark_w and u > 0 and (mark_w.w[name] or w) <= w then
          mark_w.w[name] = w
        end
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
if close_now and win_of then
  for i = 1, nbands do
    local b = bands[i]
    local w = not b.bucket and win_of(b, 0)
    if w and w ~= huge and w >= b.w then
      if w > b.w then
        b.w, b.u = w, 0
      end
      -- What the others may have taken of window w since the state was
      -- written (base: its time): all of its N, but for what a bucket
      -- charging the same unit can grant them in the window from then,
      -- at the whole rate from the balance the state shows. With no
      -- state, from the window's start with a full bucket.
      local room = b.n
      local fin, from = win_start(b, w + 1, true), win_start(b, w, true)
      if fin and from then
        if raw then
          from = math.max(from, base)
        end
        for j = 1, nbands do
          local c = bands[j]
          if c.bucket and c.unit == b.unit then
            local more = 0
            if fin > from then
              more = c.burst + c.rate * (fin - from) / 1000000
              if raw then
                more = math.min(more, c.rate * (fin - (c.z0 or c.z)) / 1000000)
              end
            end
            room = math.min(room, math.max(0, more))
          end
        end
      end
      b.u = math.max(b.u, math.min(b.n, b.u + room))
      b.rec = true
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

-- Each request's wait (ns) and number, and its binding band (earliest's):
-- w1, s1 and by1 for the one request of most calls, and the lists for more.
local w1, s1, by1 = 0, 0, '~'
local waits_ns, seqs, bys = nil, nil, nil
if m > 1 then
  waits_ns, seqs, bys = {}, {}, {}
end
local granted = false
local shadow_costs = nil -- the costs granted, while a stored limit is in shadow mode
for r = 1, m do
  if fair then
    fair.next(r)
  end
  local max_wait, cost = -1, ones
  if waits then
    max_wait, cost = waits[r], costs[r]
  end
  local caller_max = max_wait
  local turn, retry = true, 0
  if fair then
    if fair.stopped then
      turn, retry = false, fair.stopped
    else
      local h
      turn, h = fair.gate(cost)
      if not turn then
        retry = h
      elseif h >= 0 and (max_wait < 0 or h < max_wait) then
        max_wait = h -- the booking horizon, or the caller's maximum if shorter
      end
    end
  end
  local s, idx, exact, by = nil, nil, nil, 0
  if turn then
    s, idx, exact, by = earliest(pause, cost)
  end
  if not s or by == 0 then
    by1 = '~'
  elseif by < 0 then
    by1 = '~p'
  else
    by1 = bands[by].name
  end
  -- The slot as ns from now (tools.lua's tell).
  local w = s and math.floor((s + now_frac) * 1000 + 0.5) - now_ns
  if not turn then
    -- fair.lua: not this tenant's turn; neither it nor the rest of the
    -- batch is booked.
    fair.stopped = retry
    fair.outlives(caller_max, retry)
    w1, s1 = math.ceil(retry * 1000), -3
  elseif not s then
    w1, s1 = 0, -2
  elseif s > max_queue_us then
    w1, s1 = 0, -1
  elseif max_wait >= 0 and w > max_wait * 1000 then
    if fair then
      -- Beyond the booking horizon: ask again when the slot is within it.
      fair.beyond(w / 1000)
      fair.stopped = math.max(w / 1000 - max_wait, 1)
      fair.outlives(caller_max, fair.stopped)
      w1, s1 = math.ceil(fair.stopped * 1000), -3
    else
      w1, s1 = w, 0
    end
  else
    if fair then
      fair.booked()
    end
    take(s, cost, idx, exact)
    seq = seq + 1
    granted = true
    w1, s1 = w, seq
    if shadow_bands then
      shadow_costs = shadow_costs or {}
      shadow_costs[#shadow_costs + 1] = cost
    end
  end
  if waits_ns then
    waits_ns[r], seqs[r], bys[r] = w1, s1, by1
  end
end
if fair then
  if fair.stopped then
    fair.defer(fair.stopped)
  end
  fair.finish(true)
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
if m == 1 then
  return reply1(w1, s1, state, stored_text, by1)
end
-- (m is 0, a floor alone, or more than 1.)
local out = {now_us, now_ns, m}
for r = 1, m do
  out[2 + 2 * r] = waits_ns[r]
  out[3 + 2 * r] = seqs[r]
end
local n = 3 + 2 * m
out[n + 1] = #state
out[n + 2] = state
out[n + 3] = #stored_text
out[n + 4] = stored_text
out[n + 5] = bys and table.concat(bys, ' ') or ''
return struct.pack('<I7HI4' .. string.rep('i8i8', m) .. 'I4c0I4c0c0', unpack(out))
