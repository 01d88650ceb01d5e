-- core.lua: the policy and state of one key group, shared by every script
-- that touches a key (lua.go puts it in front of each operation's file, so
-- each script is complete on its own).
--
-- A key group is paced by a policy: one or more bands, each charging one
-- unit of cost. A band is either
--   a token bucket: golang.org/x/time/rate's Limiter, kept GCRA style as the
--   time z at which its balance is zero (Guava's nextFreeTicket): the
--   balance at time t is min(burst, (t - z) * rate); or
--   a fixed-window quota: at most N units in each window [origin + i*len,
--   origin + (i+1)*len), kept as the latest window w holding reservations
--   and the units u reserved in it.
-- A reservation gets one slot, the earliest time at which every band allows
-- it (see reserve.lua).
--
-- KEYS[1]  the state, a string (absent: every bucket full, every window
--          unused, no pause). Space-separated fields:
--            1        format version
--            t        integer Unix µs of the last write (server time, or the
--                     client clock's); every time below is in integer ns
--                     relative to t, rounded up (never earlier)
--            x        the key's expiry as last set, ns relative to t: a
--                     write that needs no later expiry keeps it (KEEPTTL)
--            s        the number of the last reservation granted (per key,
--                     consecutive; it identifies a reservation to adjust.lua)
--            p        no slot before p (a pause)
--            c        1 when a stored limit may exist (KEYS[2]), else 0
--          then one record per band, in the policy's order:
--            name z e   a bucket: z and e, the slot of the last reservation
--                       granted (x/time/rate's lastEvent, for adjust.lua)
--            name w u   a window: the index w of the latest window holding
--                       reservations, and the units u reserved in it
--          The key expires once every bucket would be full again, every
--          window used is over and any pause has ended, plus 1 to 2 s, so
--          a missing key reads the same and expiry is never observed.
-- KEYS[2]  the key's stored limit (cmd/pacer set), a string, or absent:
--          "<mode> <k> <bands>", mode "enforce" or "shadow", bands as in
--          ARGV below but with the unit by name (a unit the caller does not
--          charge costs 0). Enforced, it replaces the caller's policy; in
--          shadow mode the caller's policy is enforced and reserve.lua counts
--          what the stored one would have done (KEYS[3] there). Read only
--          when the state says one may exist or the state is absent.
-- ARGV[1]  now: integer Unix µs, or "" to use the server's TIME
-- ARGV[2]  the sub-microsecond part of now in ns (0..999); ignored with ""
-- ARGV[3]  share: the fraction (0, 1] of every band's rate and window N this
--          caller may use (the live part of a fleet some of whose members
--          pace locally; reserve's fleet.go). "1" almost always.
-- ARGV[4]  the cost units' names, space-separated, in the order requests
--          give their costs
-- ARGV[5]  k, the number of bands, then k records of five:
--            name     the band's name (no spaces)
--            unit     1-based index of the unit it charges
--            kind     "b" (bucket) or "w" (window)
--            a        bucket: rate, units per second (decimal > 0);
--                     window: N, units per window (decimal >= 1)
--            b        bucket: burst (decimal >= 1);
--                     window: "<len_us>:<origin_us>", integer µs, len > 0,
--                     origin = a window boundary modulo len
-- then the operation's own arguments, from ARGV[opi].
--
-- Errors are replies "PACER_<CODE> text"; reserve's Go code maps the code,
-- never the text.
--
-- Precision: Lua numbers are doubles, which cannot hold Unix µs (~1.8e15)
-- and a fraction. All arithmetic is on µs relative to now (small numbers,
-- exact to far below a ns). The engine is written for Redis's Lua, where
-- every operation costs tens of ns: few calls, tables built whole.

local max_queue_us = 30 * 365 * 24 * 3600 * 1000000 -- reserve.ErrQueueTooLong
local same_us = 0.0005 -- slots lie on a ns grid: times within half a ns are one instant

local server_time = ARGV[1] == ''
local now_us, now_frac, now_ns = 0, 0, 0
if server_time then
  local tm = redis.call('TIME')
  now_us = tm[1] * 1000000 + tm[2]
else
  now_us = tonumber(ARGV[1])
  now_ns = tonumber(ARGV[2])
  now_frac = now_ns / 1000
end
local share = 1
if ARGV[3] ~= '1' then
  share = tonumber(ARGV[3])
  if not share or share <= 0 or share > 1 then
    return redis.error_reply('PACER_ARG share must be in (0, 1]')
  end
end

-- read_bands parses k band records (see ARGV[5]) from list, k at list[i];
-- by_name: the unit is a name (a stored limit), else an index. It returns
-- the bands and the index after them, or nil and why.
local function read_bands(list, i, by_name)
  local k = tonumber(list[i])
  if not k or k < 1 then
    return nil, 'need at least one band'
  end
  local out, unitnames = {}, nil
  for n = 1, k do
    local name, unit, kind, a, b = list[i + 1], list[i + 2], list[i + 3], tonumber(list[i + 4]), list[i + 5]
    if by_name then
      if not unitnames then
        unitnames = {}
        local u = 0
        for un in string.gmatch(ARGV[4], '%S+') do
          u = u + 1
          unitnames[un] = u
        end
      end
      unit = unitnames[unit] or 0 -- a unit this caller does not charge: cost 0
    else
      unit = tonumber(unit)
    end
    if kind == 'b' then
      b = tonumber(b)
      if not a or a <= 0 or a == math.huge or not b or b < 1 then
        return nil, 'bad bucket ' .. tostring(name)
      end
      local upp = 1000000 / (a * share) -- µs per unit
      out[n] = {name = name, unit = unit, bucket = true, upp = upp, burst = b, fill = b * upp, z = -b * upp, e = -b * upp}
    elseif kind == 'w' then
      local len, origin = string.match(b or '', '^(%d+):(%d+)$')
      len, origin = tonumber(len), tonumber(origin)
      if not a or a < 1 or not len or len < 1 then
        return nil, 'bad window ' .. tostring(name)
      end
      -- Window indexes count from the origin. now_us - origin is an exact
      -- integer, split into whole windows and a remainder, so that times
      -- relative to now (small, with fractions of a µs) are placed in their
      -- window without adding a fraction to a number near 2^51.
      local q = now_us - origin
      local cur = math.floor(q / len)
      local rem = q - cur * len
      if rem < 0 then
        cur, rem = cur - 1, rem + len
      elseif rem >= len then
        cur, rem = cur + 1, rem - len
      end
      out[n] = {name = name, unit = unit, bucket = false, n = a * share, burst = a, len = len, rem = rem + now_frac, cur = cur, w = cur, u = 0}
    else
      return nil, 'bad band kind ' .. tostring(kind)
    end
    i = i + 5
  end
  return out, i + 1
end

local bands, opi = read_bands(ARGV, 5, false)
if not bands then
  return redis.error_reply('PACER_ARG ' .. opi)
end

-- The state. GET fails with WRONGTYPE, before anything is written, if the
-- key holds another type.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the state key holds another type')
end
local base = -now_frac -- stored ns / 1000 + base = µs relative to now
local expiry, seq, pause, has_cfg = 0, 0, 0, 0
local rest = nil
if raw then
  local v, t, x, s, p, c, r = string.match(raw, '^(%d) (%d+) (%-?%d+) (%d+) (%-?[%d.]+) (%d)(.*)$')
  if v ~= '1' then
    return redis.error_reply('PACER_WRONGTYPE the state key holds something else')
  end
  t = tonumber(t)
  -- With server time, a clock that steps back (an NTP step, a failover to a
  -- host that is behind) must not become a debt as long as the step: the
  -- stored times are read as if no time had passed since t, and written
  -- back in the new clock. With a client clock, no such rule: clients whose
  -- clocks disagree would otherwise refill buckets for each other.
  if not (server_time and t > now_us) then
    base = t - now_us - now_frac
  end
  expiry = tonumber(x) / 1000 + base
  seq = tonumber(s)
  pause = tonumber(p) / 1000 + base
  has_cfg = tonumber(c)
  rest = r
end

-- A stored limit in force replaces the caller's policy: the caller's is the
-- default when nothing is stored.
local cfg_mode, shadow_bands = nil, nil
if has_cfg == 1 or not raw then
  local cfg = redis.pcall('GET', KEYS[2])
  if type(cfg) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE the stored limit key holds another type')
  end
  has_cfg = 0
  if cfg then
    has_cfg = 1
    local list = {}
    for f in string.gmatch(cfg, '%S+') do
      list[#list + 1] = f
    end
    cfg_mode = list[1]
    local b, why = read_bands(list, 2, true)
    if not b then
      return redis.error_reply('PACER_CONFIG ' .. why)
    end
    if cfg_mode == 'enforce' then
      bands = b
    elseif cfg_mode == 'shadow' then
      shadow_bands = b -- counted by reserve.lua, never enforced
    else
      return redis.error_reply('PACER_CONFIG unknown mode ' .. tostring(cfg_mode))
    end
  end
end
local nbands = #bands

-- Each band's stored state, relative to now. Records are matched by name:
-- one written under another policy (a stored limit set or removed) keeps
-- the state of the bands both policies have.
-- load_records reads band records ("name x y" each, see KEYS[1]) from
-- text into the bands of list, times relative to now by base.
local function load_records(text, list, at)
  local i, n = 0, #list
  for name, x, y in string.gmatch(text, ' (%S+) (%S+) (%S+)') do
    i = i + 1
    local b = list[i]
    if not b or b.name ~= name then
      b = nil
      for j = 1, n do
        if list[j].name == name then
          b = list[j]
        end
      end
    end
    if b and b.bucket then
      local z = tonumber(x) / 1000 + at
      if z > -b.fill then
        b.z = z
      end
      b.e = tonumber(y) / 1000 + at
    elseif b then
      local w = tonumber(x)
      if w >= b.cur then
        b.w, b.u = w, tonumber(y)
      end
    end
  end
end
if rest then
  load_records(rest, bands, base)
end
if pause < 0 then
  pause = 0
end

-- A window band's window i starts (i - cur) * len - rem µs from now (rem:
-- how far into the current window now is).

-- grid returns s (µs relative to now) rounded up to a whole ns of absolute
-- time: slots lie on a ns grid, so the slot a reply tells (whole ns) is the
-- slot itself, and adjust.lua can compare slots exactly.
local function grid(s)
  local x = (s + now_frac) * 1000
  -- Float noise grows with the number (2^-52 of it): a time a hair above a
  -- whole ns is that ns.
  return math.ceil(x - 1e-3 - math.abs(x) * 4e-16) / 1000 - now_frac
end

-- tell returns a slot on the grid as ns from now: now_ns + tell(q) is the
-- slot's whole ns, free of float noise.
local function tell(q)
  return math.floor((q + now_frac) * 1000 + 0.5) - now_ns
end

-- earliest returns the earliest slot at or after s (µs relative to now) at
-- which every band can take cost (indexed by unit), on the ns grid; the
-- window each window band would use; and the exact time the slot was
-- rounded up from, at which the buckets are charged (take). A band charged
-- nothing holds nobody.
local function earliest(s, cost)
  local idx = nil
  local q = grid(s)
  for _ = 1, 8 do
    local moved = false
    for i = 1, nbands do
      local b = bands[i]
      local c = cost[b.unit] or 0
      if c > 0 then
        if b.bucket then
          local t = b.z + c * b.upp
          if t > q then
            s, q, moved = t, grid(t), true
          end
        else
          local w = b.cur + math.floor((b.rem + q) / b.len)
          if w < b.w then
            -- First come, first served: nothing goes into a window
            -- before the latest one holding reservations.
            w = b.w
          end
          -- Units are sums of decimals: 18.267 - 0.267 may come out as
          -- 18.000000000000004. A part in 1e9 of N is rounding, not use.
          if w == b.w and b.u + c > b.n * (1 + 1e-9) then
            w = w + 1
          end
          local ws = (w - b.cur) * b.len - b.rem
          if ws > q then
            s, q, moved = ws, grid(ws), true
          end
          idx = idx or {}
          idx[i] = w
        end
      end
    end
    if not moved then
      break
    end
  end
  return q, idx, s
end

-- take commits a reservation of cost at slot q, from earliest: each
-- bucket is charged at the exact time s the slot was rounded up from
-- (x/time/rate's ReserveN at s: the balance at s, less c), and its last
-- event is the slot.
local function take(q, cost, idx, s)
  s = s or q
  for i = 1, nbands do
    local b = bands[i]
    local c = cost[b.unit] or 0
    if c > 0 then
      if b.bucket then
        local z = b.z
        if z < s - b.fill then
          z = s - b.fill
        end
        b.z = z + c * b.upp
        -- The last event never moves back: a reservation landing in a
        -- hole left by a cancel gets an earlier slot than a live one, and
        -- adjust.lua must still see the latest slot, or it would give back
        -- more than was reserved (x/time/rate sets lastEvent regardless).
        if q > b.e then
          b.e = q
        end
      else
        if idx[i] > b.w then
          b.w, b.u = idx[i], 0
        end
        b.u = b.u + c
      end
    end
  end
end

-- ns returns s (µs relative to now) in integer ns: rounded up, or toward
-- zero when negative (a slot already passed), ignoring float noise far
-- below a ns.
local function ns(s)
  if s < 0 then
    return -math.floor(-s * 1000 + 1e-6)
  end
  return math.ceil(s * 1000 - 1e-6)
end

-- save writes the state back. Times are stored as ns relative to now_us,
-- to a thousandth of a ns. The expiry is set only when it must move later,
-- one to two seconds past what the state needs.
-- records returns the bands of list as state records (see KEYS[1]), and
-- how long from now (µs) they matter: until every bucket is full and every
-- window used is over, and at least need.
local function records(list, need)
  local text = ''
  for i = 1, #list do
    local b = list[i]
    if b.bucket then
      text = text .. string.format(' %s %.3f %.3f', b.name, (b.z + now_frac) * 1000, (b.e + now_frac) * 1000)
      if b.z + b.fill > need then
        need = b.z + b.fill
      end
    else
      text = text .. string.format(' %s %d %.17g', b.name, b.w, b.u)
      local over = (b.w + 1 - b.cur) * b.len - b.rem
      if b.u > 0 and over > need then
        need = over
      end
    end
  end
  return text, need
end

local function save()
  local text, need = records(bands, pause)
  need = need + 1000000
  local keep = expiry >= need
  if not keep then
    expiry = need + 1000000
  end
  local value = string.format('1 %d %d %d %.3f %d', now_us, ns(expiry) + now_ns, seq, (pause + now_frac) * 1000, has_cfg) .. text
  if keep then
    redis.call('SET', KEYS[1], value, 'KEEPTTL')
  else
    redis.call('SET', KEYS[1], value, 'PX', math.ceil(expiry / 1000))
  end
end

-- cost_arg reads one request's costs, one decimal >= 0 per unit, from
-- ARGV[i...] into a table indexed by unit; nil if one is not such a number.
local nunits = 1
if string.find(ARGV[4], ' ', 1, true) then
  for _ in string.gmatch(ARGV[4], ' ') do
    nunits = nunits + 1
  end
end
local function cost_arg(i)
  local cost = {}
  for u = 1, nunits do
    local c = tonumber(ARGV[i + u - 1])
    if not c or c < 0 or c ~= c or c == math.huge then
      return nil
    end
    cost[u] = c
  end
  return cost
end

-- fits reports whether cost fits every band at all (at most its burst or
-- N): a larger cost could never be granted.
local function fits(cost)
  for i = 1, nbands do
    local b = bands[i]
    if (cost[b.unit] or 0) > b.burst + 1e-9 then
      return false
    end
  end
  return true
end
