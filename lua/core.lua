-- core.lua: the policy and state of one key group, shared by every script
-- that touches a key (lua.go puts it in front of each operation's file, so
-- each script is complete on its own). The same scripts run in Redis and,
-- while Redis is unavailable, in each process's local fallback
-- (internal/luastore), at the process's own share (ARGV[2]'s member form).
--
-- A key group is paced by a policy: one or more bands, each charging one
-- unit of cost. A band is either
--   a token bucket: golang.org/x/time/rate's Limiter, kept GCRA style as the
--   time z at which its balance is zero (Guava's nextFreeTicket): the
--   balance at time t is min(burst, (t - z) * rate); or
--   a fixed-window quota: at most N units in each window [origin + i*len,
--   origin + (i+1)*len), kept as the latest window w holding reservations
--   and the units u reserved in it; or
--   a calendar-window quota: the same, the windows being a time zone's
--   days, ISO weeks or months, numbered by their ordinal (below), their
--   boundaries given by the caller for each call (Redis has no tz
--   database), the clock that says which one is current staying the
--   script's (Redis's TIME).
-- A reservation gets one slot, the earliest time at which every band allows
-- it (see reserve.lua).
--
-- KEYS[1]  the state, a string (absent: every bucket full, every window
--          unused, no pause), in one of three formats, all of them read;
--          the format written is the one ARGV[2] asks for. What every
--          format holds:
--            t        integer Unix µs of the last write (server time, or the
--                     client clock's); every time below but x is in ns
--                     relative to t, rounded up (never earlier)
--            x        the key's expiry as last set, integer ms relative to
--                     t (rounded down): a write that needs no later expiry
--                     keeps it (KEEPTTL)
--            s        the number of the last reservation granted (per key,
--                     consecutive; it identifies a reservation to adjust.lua)
--            p        no slot before p (a pause); 0 when the key was never
--                     paused (or was resumed); and a flag: a stored limit
--                     may exist (KEYS[2])
--          then one record per band, in the policy's order:
--            name z e   a bucket: z and e, the slot of the last reservation
--                       granted (x/time/rate's lastEvent, for adjust.lua)
--            name wW u  a window: the index W of the latest window holding
--                       reservations (after a "w"), and the units u
--                       reserved in it
--          Format 3, binary (Redis's struct library, little-endian), its
--          first byte a form that is never a digit, the flag in its lowest
--          bit (c: 1 when a stored limit may exist). A Limit's state (one
--          bucket named "permits", no other record, no pause written) in
--          the smallest of three forms that holds it exactly:
--            0xA0+c  "<BI7HB":       t, x, s; z = e = t (a key whose one
--                                    slot was its write: 11 bytes, so an
--                                    idle key is 88 B of MEMORY USAGE)
--            0xB0+c  "<BI7I4I4i6i6": t, x, s, z, e, whole ns (28 bytes)
--            0xC0+c  "<BI7I4I6dd":   t, x, s, z, e as doubles (34 bytes)
--          and any other state as
--            0xD0+c  "<BI7I6I6d" then text: t, x, s, p (a double), then
--                    the records as format 2 writes them (" name z e", ...)
--          Format 2, text, space-separated: "t x s p" then the records,
--          times without decimals when whole, else to a thousandth, p
--          prefixed with "c" for the flag; a policy of one bucket named
--          "permits" writes its record as "z e", without the name.
-- KEYS[2]  the key's stored limit (cmd/pacer set), a string, or absent:
--          "<mode> <k> <bands>", mode "enforce" or "shadow", bands as in
--          ARGV below but with the unit by name (a unit the caller does not
--          charge costs 0). Enforced, it replaces the caller's bands of the
--          same names and adds the others; the caller's other bands stay in
--          force (the default when nothing is stored). In shadow mode the
--          caller's policy is enforced and reserve.lua counts what the
--          stored one, so merged, would have done (KEYS[3] there). Read only
--          when the state says one may exist or the state is absent.
-- ARGV[1]  the call's deadline: "" (none), or Unix ms on the server's
--          clock: a call run after it is refused (PACER_STALE) and changes
--          nothing (ignored with a client clock)
-- ARGV[2]  the call's environment, "1" in the common case (server time,
--          format 3, the whole limit); else, in this order and each
--          optional, "t<now_us>:<now_ns> ", a client clock (integer Unix
--          µs and its sub-µs part in ns, 0..999); "f1 ", "f2 " or "f3 ",
--          the state format to write (none: 3); "c<tables> ", the calendar
--          tables (below); then the share.
--          The share: "1", the whole limit; or "<n> <k>...": the fleet has n
--          members (Limiters), ranked 0..n-1 by id, and the ranks k (at
--          least one, fewer than n) are held: they may pace locally on their
--          own shares, which this caller's group leaves them (reserve's
--          fleet.go). A member k's own share (ARGV[2]'s "m" form, while it
--          paces locally) is rate/n, a burst B_k and, in window w, N_k(w)
--          units, so that the members' shares add up to the limit:
--            B_k = floor(b/n) + (k < b mod n)  when b >= n, else
--            B_k = 1 + (k < b - 1), slots on a lattice of the fleet's
--                  spacing shared out by rank (see the lattice below);
--            N_k(w) = floor(F/n) + ((k + w) mod n < F mod n), F = floor(N).
--          The group takes the rest: rate * (n - #held) / n, a burst of b
--          less the held members' B_k (at least 0), and in window w, N less
--          their N_k(w); on the lattice's band (see below) it takes one
--          slot per instant of the ranks not held.
--          Or "m <n> <k> <a>": member k's own share of a fleet of n (a
--          process pacing locally, on its in-process store: the local
--          fallback runs these scripts too): rate / max(n, a), a burst B_k,
--          N_k(w) units of window w, and on a bucket band whose burst is
--          under n its slots on rank k's instants of the lattice. A cost
--          above a share's burst (B_k, or the group's b less the held
--          members' B_k; off the lattice) is never granted at that share:
--          -2, as a window's N_k below the cost (earliest). a is
--          another fleet size (0: none) the member keeps within too: right
--          after the fleet changed, members may pace on either size, so it
--          takes the smaller burst and window quota of the two and only
--          the instants of rank k on both lattices (k < a).
--          The calendar tables, "c<tables> ", when a band
--          in force may be a calendar window: tables separated by ";",
--          each "<spec>=<i0>:<b0>:<len>*<count>,<len>*<count>...", spec
--          the band's "<period>:<zone>" (ARGV[3]), b0 the integer Unix µs
--          at which the window numbered i0 starts, then runs of count
--          windows of len µs each, one after the other (a day of the
--          zone's is 86400000000 µs, or 23 or 25 hours at a DST change).
--          The caller computes them from its tz database, from two
--          periods before its own clock's now to a year or more ahead:
--          Redis's now, seconds off the caller's, lies well inside, and so
--          do the windows of calls queued into the next periods. A window
--          past the table's end is never granted (the call is refused as
--          a queue too long, -1); a band whose table is missing
--          refuses the call, PACER_CALENDAR "<spec>" (a stored limit's
--          calendar band the caller did not know: it sends the table next
--          time). The index of a calendar window, its ordinal, is fixed by
--          the calendar, so a state's record keeps its meaning whatever
--          the table: a day's is the number of its local date counted
--          from 1970-01-01, an ISO week's the number of its Monday counted
--          in weeks from Monday 1970-01-05, a month's (year - 1970) * 12 +
--          month - 1. A UTC day's ordinal is a fixed window's of one day
--          from the epoch.
-- ARGV[3]  the policy, in one argument: "L" followed by "<dd" (struct):
--          a Limit, one bucket named "permits" charging the one unit
--          "permits", its rate (units per second, > 0) and burst (a whole
--          number >= 1); or "" for no band (pause.lua, resume.lua and
--          rewrite.lua may act on the state's records alone); or text,
--          space-separated: the number of cost units, their names (in the
--          order requests give their costs), k, the number of bands, then
--          k records of five:
--            name     the band's name (no spaces)
--            unit     1-based index of the unit it charges
--            kind     "b" (bucket), "w" (window) or "c" (calendar
--                     window)
--            a        bucket: rate, units per second (decimal > 0);
--                     window: N, units per window (decimal >= 1)
--            b        bucket: burst (integer >= 1);
--                     window: "<len_us>:<origin_us>", integer µs, len > 0,
--                     origin = a window boundary modulo len;
--                     calendar window: "<period>:<zone>", period "day",
--                     "week" or "month", zone a tz database name ("UTC",
--                     "America/Los_Angeles"), the key of its table in
--                     ARGV[2]. Earlier versions refuse kind "c"
--                     (PACER_ARG, or PACER_CONFIG in a stored limit),
--                     and the "c" tables (PACER_ARG bad share): nothing
--                     changed; its state record is a window's ("wW u"),
--                     which they keep as it is.
-- then the operation's own arguments, from ARGV[opi], opi = 4.
--
-- Errors are replies "PACER_<CODE> text"; reserve's Go code maps the code,
-- never the text.
--
-- Precision: Lua numbers are doubles, which cannot hold Unix µs (~1.8e15)
-- and a fraction. All arithmetic is on µs relative to now (small numbers,
-- exact to far below a ns). The engine is written for Redis's Lua, where
-- every operation costs tens of ns: few calls, tables built whole.

-- The calendar tables: for each calendar band's "<period>:<zone>", the
-- zone's period boundaries around now (see ARGV[3]'s kind "c").
-- cal_tables[spec] = {i0, rel0, segs}: the window numbered i0 starts rel0
-- µs after now_us (an exact integer), and segs lists {len, count}: count
-- windows of len µs each, one after the other.
local cal_tables = nil
if cal_arg then
  cal_tables = {}
  for part in string.gmatch(cal_arg, '[^;]+') do
    local spec, i0, b0, segs = string.match(part, '^([^=]+)=(%-?%d+):(%d+):([%d*,]+)$')
    if not spec then
      return redis.error_reply('PACER_ARG bad calendar table')
    end
    local t = {i0 = tonumber(i0), rel0 = tonumber(b0) - now_us, segs = {}}
    for seg in string.gmatch(segs, '[^,]+') do
      local l, k = string.match(seg, '^(%d+)%*(%d+)$')
      l, k = tonumber(l), tonumber(k)
      if not l or l < 1 or k < 1 then
        return redis.error_reply('PACER_ARG bad calendar table')
      end
      t.segs[#t.segs + 1] = {l, k}
    end
    if #t.segs == 0 then
      return redis.error_reply('PACER_ARG bad calendar table')
    end
    cal_tables[spec] = t
  end
end

-- The share: fleet size n and the held ranks, or nil for the whole; or,
-- for a member pacing alone, its rank (member) and another fleet size
-- (also, 0 for none).
local fleet_n, held, member, also = 1, nil, nil, 0
local rate_share = 1
local member_burst, member_n = nil, nil
if share_arg ~= '1' then
  if string.byte(share_arg, 1) == 109 then -- 'm'
    local n, k, a = string.match(share_arg, '^m (%d+) (%d+) (%d+)$')
    n, k, a = tonumber(n), tonumber(k), tonumber(a)
    if not n or n < 2 or k >= n or (a > 1 and k >= a) then
      return redis.error_reply('PACER_ARG bad share')
    end
    fleet_n, member, also = n, k, a > 1 and a or 0
    rate_share = 1 / math.max(n, also)
  else
    held = {}
    for f in string.gmatch(share_arg, '%S+') do
      local v = tonumber(f)
      if not v or v < 0 or v ~= math.floor(v) then
        return redis.error_reply('PACER_ARG bad share')
      end
      held[#held + 1] = v
    end
    fleet_n = table.remove(held, 1)
    if not fleet_n or fleet_n < 2 or #held < 1 or #held >= fleet_n then
      return redis.error_reply('PACER_ARG bad share')
    end
    for i = 1, #held do
      if held[i] >= fleet_n then
        return redis.error_reply('PACER_ARG bad share')
      end
    end
    rate_share = (fleet_n - #held) / fleet_n
  end

  -- member_burst is B_k, member k's burst in a fleet of n (see ARGV[2]).
  member_burst = function(b, k, n)
    n = n or fleet_n
    if b >= n then
      return math.floor(b / n) + (k < b % n and 1 or 0)
    end
    return 1 + (k < b - 1 and 1 or 0)
  end

  -- member_n is N_k(w), member k's units in window w in a fleet of n.
  member_n = function(nn, k, w, n)
    n = n or fleet_n
    local f = math.floor(nn)
    return math.floor(f / n) + ((k + w) % n < f % n and 1 or 0)
  end
end

-- room_period is how many windows a share's room takes to repeat: n, or
-- for a member between two fleet sizes the least common multiple of both.
local room_period = fleet_n
if also > 0 then
  local x, y = fleet_n, also
  while y ~= 0 do
    x, y = y, x % y
  end
  room_period = fleet_n * also / x
end


local policy = ARGV[3]

-- The state. GET fails with WRONGTYPE, before anything is written, if the
-- key holds another type.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the state key holds another type')
end
local base = -now_frac -- stored ns / 1000 + base = µs relative to now
local expiry, seq, pause, has_cfg = 0, 0, 0, 0
-- pause_at: the stored pause, relative to now, when the key was paused (a
-- stored pause under 1 µs after the write is none: the write's own time).
local pause_at = nil
local format1 = false
local rest = nil -- the records, as text (formats 1 and 2, and 3's general form)
local rz, re = nil, nil -- a Limit's one record, in format 3's Limit forms (ns after t)
local rec_z, rec_e = nil, nil -- a Limit's one record, nameless (format 2 or 3), µs relative to now
if raw then
  local t, x, s, p
  local b0 = string.byte(raw, 1)
  if b0 and b0 >= 160 then
    -- Format 3: a Limit's forms (head.lua's limit_read), or the general
    -- form: the flag is the first byte's lowest bit.
    p = 0
    t, x, s, rz, re, has_cfg = limit_read(raw)
    if not t and b0 - b0 % 2 == 208 and #raw >= 28 then
      has_cfg = b0 % 2
      t, x, s, p = struct.unpack('<I7I6I6d', raw, 2)
      rest = string.sub(raw, 29)
      if p ~= p or p == huge or p == -huge then
        t = nil
      end
    end
    if not t then
      return redis.error_reply('PACER_WRONGTYPE the state key holds something else')
    end
    x = x * 1000 -- ms
  else
    -- Format 2, else format 1 (older clients).
    local r
    t, x, s, p, r = string.match(raw, '^(%d%d+) (%d+) (%d+) (c?%-?[%d.]+)(.*)$')
    if t then
      x = tonumber(x) * 1000 -- ms
      if string.byte(p, 1) == 99 then -- 'c'
        has_cfg, p = 1, string.sub(p, 2)
      end
    else
      local v, c
      v, t, x, s, p, c, r = string.match(raw, '^(%d) (%d+) (%-?%d+) (%d+) (%-?[%d.]+) (%d)(.*)$')
      if v ~= '1' then
        return redis.error_reply('PACER_WRONGTYPE the state key holds something else')
      end
      x, has_cfg = tonumber(x) / 1000, tonumber(c)
      format1 = true
    end
    t, s, p = tonumber(t), tonumber(s), tonumber(p)
    rest = r
  end
  -- With server time, a clock that steps back (an NTP step, a failover to a
  -- host that is behind) must not become a debt as long as the step: the
  -- stored times are read as if no time had passed since t, and written
  -- back in the new clock. With a client clock, no such rule: clients whose
  -- clocks disagree would otherwise refill buckets for each other.
  if not (server_time and t > now_us) then
    base = t - now_us - now_frac
  end
  expiry = x + base
  seq = s
  if rz then
    rec_z, rec_e = rz / 1000 + base, re / 1000 + base
  end
  if p == 0 then
    pause = base
  else
    pause = p / 1000 + base
    if p >= 1000 or p < 0 then
      pause_at = pause
    end
  end
end

-- The stored limit (KEYS[2]), read when the state's flag says one may
-- exist, or there is no state: parsed below, once the policy is.
local cfg = nil
if has_cfg == 1 or not raw then
  cfg = redis.pcall('GET', KEYS[2])
  if type(cfg) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE the stored limit key holds another type')
  end
  has_cfg = cfg and 1 or 0
end

-- bucket_band returns a token bucket band charging unit (an index) at
-- rate units per second with burst b, at the caller's share; or nil and
-- why. Made below when a policy or a stored limit is text, or at a share
-- (a Limit's band at the whole share is made in place).
local bucket_band = nil
if share_arg ~= '1' or cfg or (policy ~= '' and string.byte(policy, 1) ~= 76) then
  bucket_band = function(name, unit, a, b)
    -- (a ~= a: NaN, which every comparison passes as false.)
    if not a or a ~= a or a <= 0 or a == huge or not b or b ~= b or b < 1 or b == huge or b ~= math.floor(b) then
      return nil, 'bad bucket ' .. tostring(name)
    end
    local upp = 1000000 / (a * rate_share) -- µs per unit
    local eff = b -- the burst at the share
    if member then
      eff = member_burst(b, member)
      if also > 0 then
        eff = math.min(eff, member_burst(b, member, also))
      end
    elseif held then
      for j = 1, #held do
        eff = eff - member_burst(b, held[j])
      end
      if eff < 0 then
        eff = 0
      end
      -- Never more than the share of the whole bucket's fill: callers
      -- whose shares differ (their views of the fleet do, for a heartbeat)
      -- read one state, and each charges its units at its share's spacing,
      -- so every caller keeps to the whole bucket on the same time axis.
      if eff > b * rate_share then
        eff = b * rate_share
      end
    end
    local fill = eff * upp
    return {name = name, unit = unit, bucket = true, rate = a, lat = a, upp = upp, burst = b, eff = eff, fill = fill, z = -fill, e = -fill}
  end
end

-- any_window: a window band (fixed or calendar) was read, in force or in a
-- stored limit (the window functions below are made only then).
local any_window = false

-- read_bands parses k band records (see ARGV[3]) from list, k at list[i];
-- unitnames: the units by name (a stored limit names them), else the unit
-- is an index below nunits + 1; zero: k may be 0. It returns the bands and
-- the index after them, or nil and why (and a calendar band's spec when
-- its table is what is missing). Made when the policy is text, or a
-- limit is stored.
local read_bands = nil
if cfg or (policy ~= '' and string.byte(policy, 1) ~= 76) then
  read_bands = function(list, i, unitnames, nunits, zero)
    local k = list[i]
    if k == '1' then
      k = 1
    else
      k = tonumber(k)
    end
    if not k or k < 0 or k ~= math.floor(k) or (k == 0 and not zero) or #list < i + 5 * k then
      return nil, 'need at least one band'
    end
    local out = {}
    for n = 1, k do
      local name, unit, kind, a, b = list[i + 1], list[i + 2], list[i + 3], tonumber(list[i + 4]), list[i + 5]
      if unitnames then
        unit = unitnames[unit] or 0 -- a unit this caller does not charge: cost 0
      elseif unit == '1' then
        unit = 1
      else
        unit = tonumber(unit)
        if not unit or unit < 1 or unit > nunits or unit ~= math.floor(unit) then
          return nil, 'bad unit index for band ' .. tostring(name)
        end
      end
      if not name or string.byte(name, 1) == 126 then -- '~': reserved
        return nil, 'bad band name'
      end
      if kind == 'b' then
        local band, why = bucket_band(name, unit, a, tonumber(b))
        if not band then
          return nil, why
        end
        out[n] = band
      elseif kind == 'c' then
        -- A calendar window: b is "<period>:<zone>", its boundaries are in
        -- ARGV[2]'s table of that name. The current window is the one the
        -- table places now in; its length is len (duration's figure).
        local t = cal_tables and cal_tables[b or '']
        if not a or a ~= a or a < 1 or a == huge or not t then
          if a and a >= 1 and a ~= huge and b then
            return nil, 'no calendar boundaries for band ' .. tostring(name), b
          end
          return nil, 'bad window ' .. tostring(name)
        end
        local rel, idx, cur, start, len = t.rel0, t.i0, nil, nil, nil
        if rel <= 0 then
          for j = 1, #t.segs do
            local l, kk = t.segs[j][1], t.segs[j][2]
            if rel + l * kk > 0 then
              local x = math.floor(-rel / l)
              cur, start, len = idx + x, rel + x * l, l
              break
            end
            rel, idx = rel + l * kk, idx + kk
          end
        end
        if not cur then
          return nil, 'the calendar boundaries of band ' .. tostring(name) .. ' do not cover now'
        end
        any_window = true
        out[n] = {name = name, unit = unit, bucket = false, n = a, burst = a, len = len, rem = now_frac - start, cur = cur, w = cur, u = 0, cal = t}
      elseif kind == 'w' then
        local len, origin = string.match(b or '', '^(%d+):(%d+)$')
        len, origin = tonumber(len), tonumber(origin)
        if not a or a ~= a or a < 1 or a == huge or not len or len < 1 then
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
        any_window = true
        out[n] = {name = name, unit = unit, bucket = false, n = a, burst = a, len = len, rem = rem + now_frac, cur = cur, w = cur, u = 0}
      else
        return nil, 'bad band kind ' .. tostring(kind)
      end
      i = i + 5
    end
    return out, i + 1
  end
end

-- The policy (ARGV[3]): the bands and the cost units (nunits of them;
-- units, their names, is made when a stored limit needs them).
local bands, nunits, units = nil, 0, nil
if string.byte(policy, 1) == 76 then -- 'L': a Limit
  if #policy ~= 17 then
    return redis.error_reply('PACER_ARG bad policy')
  end
  local rate, burst = struct.unpack('<dd', policy, 2)
  local b, why
  if bucket_band then
    b, why = bucket_band('permits', 1, rate, burst)
  elseif rate ~= rate or rate <= 0 or rate == huge or burst ~= burst or burst < 1 or burst == huge or burst ~= math.floor(burst) then
    why = 'bad bucket permits' -- (bucket_band's check, at the whole share)
  else
    local upp = 1000000 / rate
    local fill = burst * upp
    b = {name = 'permits', unit = 1, bucket = true, rate = rate, lat = rate, upp = upp, burst = burst, eff = burst, fill = fill, z = -fill, e = -fill}
  end
  if not b then
    return redis.error_reply('PACER_ARG ' .. why)
  end
  bands, nunits = {b}, 1
elseif policy == '' then
  bands = {}
else
  local list = {}
  for f in string.gmatch(policy, '%S+') do
    list[#list + 1] = f
  end
  nunits = tonumber(list[1])
  if not nunits or nunits < 0 or nunits ~= math.floor(nunits) or #list < nunits + 2 then
    return redis.error_reply('PACER_ARG bad policy')
  end
  units = {}
  for u = 1, nunits do
    units[u] = list[1 + u]
  end
  local why, missing
  bands, why, missing = read_bands(list, 2 + nunits, nil, nunits, true)
  if not bands then
    if missing then
      return redis.error_reply('PACER_CALENDAR ' .. missing .. ' ' .. why)
    end
    return redis.error_reply('PACER_ARG ' .. why)
  elseif why ~= #list + 1 then
    return redis.error_reply('PACER_ARG the band count does not match the bands')
  end
end
local opi = 4

-- A stored limit in force replaces the caller's bands of the same names and
-- adds its others: the caller's policy is the default when nothing is
-- stored. A bucket that replaces a bucket keeps the caller's lattice rate
-- (see the lattice below).
local cfg_mode, shadow_bands, stored_text = nil, nil, ''
do
  if cfg then
    stored_text = cfg
    local list = {}
    for f in string.gmatch(cfg, '%S+') do
      list[#list + 1] = f
    end
    cfg_mode = list[1]
    local unitnames = {}
    if units then
      for u = 1, nunits do
        unitnames[units[u]] = u
      end
    elseif nunits == 1 then
      unitnames.permits = 1 -- a Limit's
    end
    local b, why, missing = read_bands(list, 2, unitnames, nunits, false)
    if not b then
      if missing then
        return redis.error_reply('PACER_CALENDAR ' .. missing .. ' ' .. why)
      end
      return redis.error_reply('PACER_CONFIG ' .. why)
    end
    local function merge(into, from)
      local at = {}
      for j = 1, #into do
        at[into[j].name] = j
      end
      for j = 1, #from do
        local i = at[from[j].name]
        if i then
          if from[j].bucket and into[i].bucket then
            from[j].lat = into[i].lat
          end
          into[i] = from[j]
        else
          into[#into + 1] = from[j]
        end
      end
      return into
    end
    if cfg_mode == 'enforce' then
      if #bands > 0 then
        bands = merge(bands, b)
      end
    elseif cfg_mode == 'shadow' then
      -- Counted by reserve.lua on its own copy of the bands, never enforced:
      -- the caller's bands read again, and the stored ones merged in.
      local own
      if string.byte(policy, 1) == 76 then
        own = {(bucket_band('permits', 1, struct.unpack('<dd', policy, 2)))}
      elseif #bands > 0 then
        local pl = {}
        for f in string.gmatch(policy, '%S+') do
          pl[#pl + 1] = f
        end
        own = read_bands(pl, 2 + nunits, nil, nunits, true)
      else
        own = {}
      end
      shadow_bands = merge(own, b)
    else
      return redis.error_reply('PACER_CONFIG unknown mode ' .. tostring(cfg_mode))
    end
  end
end
local nbands = #bands

-- The window functions, made when a window band is in force (or in a
-- stored limit's shadow).
local win_of, win_start, cap = nil, nil, nil
if any_window then
  -- win_of returns the index of band b's window holding time q (µs
  -- relative to now): math.huge beyond a calendar table's end, i0 - 1
  -- before its start (a time long past: only compared).
  win_of = function(b, q)
    if not b.cal then
      return b.cur + math.floor((b.rem + q) / b.len)
    end
    local t = b.cal
    local x, rel, idx = q + now_frac, t.rel0, t.i0
    if x < rel then
      return idx - 1
    end
    for j = 1, #t.segs do
      local l, k = t.segs[j][1], t.segs[j][2]
      if x < rel + l * k then
        return idx + math.floor((x - rel) / l)
      end
      rel, idx = rel + l * k, idx + k
    end
    return huge
  end

  -- win_start returns when band b's window w starts (µs relative to now);
  -- nil for a window a calendar table does not give whole (its last
  -- boundary ends the last window it gives), or with loose (an expiry's
  -- figure, a window's end) a time at or past that boundary, its last
  -- length with an hour more per window.
  win_start = function(b, w, loose)
    if not b.cal then
      return (w - b.cur) * b.len - b.rem
    end
    local t = b.cal
    local j, rel, l = w - t.i0, t.rel0, 0
    if j < 0 then
      return rel - now_frac
    end
    for s = 1, #t.segs do
      local k
      l, k = t.segs[s][1], t.segs[s][2]
      if j < k or (j == k and (s < #t.segs or loose)) then
        return rel + j * l - now_frac
      end
      rel, j = rel + l * k, j - k
    end
    if loose then
      return rel + j * (l + 3600000000) - now_frac
    end
    return nil
  end

  -- cap returns the units window band b may hold in window w at the share.
  cap = function(b, w)
    if member then
      local c = member_n(b.n, member, w)
      if also > 0 then
        c = math.min(c, member_n(b.n, member, w, also))
      end
      return c
    end
    if not held then
      return b.n
    end
    local c = b.n
    for i = 1, #held do
      c = c - member_n(b.n, held[i], w)
    end
    return c
  end
end

-- The lattice: while some members are held (they pace locally, each on
-- its own lattice: see ARGV[2]), the group's slots on
-- the slowest bucket band whose burst is under n lie on the fleet's
-- lattice too, at the instants of the ranks not held, so that the group
-- and the held members never fire at one instant: every instant (j*n + k)
-- * u of the server's clock, u = ceil(1e9 / rate) ns, belongs to rank k.
-- The period n*u must stay under 2^40 ns for the arithmetic to be exact
-- (rates of a few per hour and up); slower bands get no lattice. The rate
-- is the caller's (the code's: b.lat), even when a stored limit sets
-- another: members pace by the stored limit they last learned, and one set
-- just before Redis failed, or during the outage, is known to some and not
-- to others; each thins its own instants of the one lattice to the rate it
-- paces by, where lattices of different rates would cross.
local lattice = nil
if held or member then
  -- A member keeps to the lattices of both its fleet sizes (ARGV[2]'s
  -- a): the period is the least common multiple of those whose lattice
  -- the band needs.
  local top, b = math.max(fleet_n, also), nil
  for i = 1, nbands do
    local x = bands[i]
    if x.bucket and x.burst < top and (not b or x.lat < b.lat) then
      b = x
    end
  end
  if b then
    local u = math.ceil(1000000000 / b.lat)
    local n, m = 1, 1
    if b.burst < fleet_n then
      n = fleet_n
    end
    if also > 0 and b.burst < also then
      m = also
    end
    local x, y = n, m
    while y ~= 0 do
      x, y = y, x % y
    end
    local ranks = n * m / x
    if u * ranks <= 1099511627776 then
      lattice = {band = b, rate = b.lat, u = u, period = u * ranks, n = n, m = m}
    end
  end
  if lattice and held then
    -- The lattice keeps the group to its share: one slot per instant of
    -- the ranks not held, which are u apart at the closest. So its bucket
    -- spaces slots at the whole rate, one at a time (a burst of 1: no two
    -- slots at one instant): at the share's rate a group of 2 ranks of 3
    -- could never take two instants u apart, and got half its share.
    -- Under a stored rate below the lattice's, the lattice alone would give
    -- the group more than its share of the stored rate: its bucket keeps
    -- the share's spacing instead, still one at a time: the group then
    -- stays within its share but cannot use runs of its instants (with 1
    -- rank of 3 held and 25/s stored under the code's 30/s, it gets 60% of
    -- its share while the member is held). A member keeps its own bucket:
    -- rate / n, its burst, on its own rank's instants.
    local lb = lattice.band
    if lb.rate >= lb.lat then
      lb.upp = 1000000 / lb.rate
    end
    lb.eff, lb.fill = 1, lb.upp
    lb.z, lb.e = -lb.fill, -lb.fill
    lattice.held = {}
    for j = 1, #held do
      lattice.held[held[j]] = true
    end
  end
  if lattice then
    local P = lattice.period
    local m1 = now_us % P -- exact: both integers under 2^53; normalized below
    if m1 < 0 then
      m1 = m1 + P
    elseif m1 >= P then
      m1 = m1 - P
    end
    local ph = (m1 * 1000 + now_ns) % P
    if ph >= P then
      ph = ph - P
    end
    lattice.phase = ph
  end
end

-- Each band's stored state, relative to now. Records are matched by name:
-- one written under another policy (a stored limit set or removed) keeps
-- the state of the bands both policies have, and the others are kept in
-- extra, as they are. The reserved records (~p, ~l, ~s, ~w) go to mark_p,
-- mark_l, mark_s, mark_w.
local extra, mark_p, mark_l, mark_s, mark_w = {}, nil, nil, nil, nil
-- ebounds: the "~e" records read, by band name (attached below as b.eb to
-- the buckets, in force or kept in extra).
local ebounds = nil
-- load_records reads band records ("name x y" each, see KEYS[1]) from
-- text into the bands of list, times relative to now by at; records of
-- no band in list go to ext (if given). A record whose kind (bucket or
-- window) is not its band's is dropped. v1: the records are written as in
-- format 1 (a window's index without "w"). Made when a state's records are
-- text, or for a stored limit's shadow (reserve.lua).
local load_records = nil
if rest or shadow_bands then
  load_records = function(text, list, at, ext, v1)
    local n = #list
    -- A policy of one bucket named "permits" (a Limit) writes its record
    -- without the name (format 2).
    local z, e = string.match(text, '^ (%S+) (%S+)$')
    if z then
      if ext then
        rec_z = (z == '0' and 0 or tonumber(z) / 1000) + at
        rec_e = (e == '0' and 0 or tonumber(e) / 1000) + at
      end
      return
    end
    local i = 0
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
      -- A window's index: after a "w" (format 2), without a decimal point
      -- (format 1, whose bucket times always have one).
      local win
      if ext and name == '~e' then
        -- A bucket's bound on its last event: "~e <band> B" (see KEYS[1]).
        -- One that has passed bounds nothing (adjust.lua moves no last event
        -- into the past).
        local f = tonumber(y)
        f = f and f / 1000 + at
        if f and f >= -same_us then
          ebounds = ebounds or {}
          ebounds[x] = f
        end
      elseif string.byte(x, 1) == 119 then
        win, x = true, string.sub(x, 2)
      else
        win = v1 and not string.find(x, '.', 1, true)
      end
      if string.byte(name, 1) == 126 then -- '~'
        if ext and name == '~p' then
          mark_p = {q = tonumber(x), e = tonumber(y) / 1000 + at}
        elseif ext and name == '~l' then
          mark_l = {u = tonumber(x), n = tonumber(y)}
        elseif ext and name == '~s' then
          mark_s = {x, y}
        elseif ext and name == '~w' then
          -- "-", or "name:W,..." (see pause.lua).
          mark_w = {q = tonumber(x), w = {}}
          for n, w in string.gmatch(y, '([^:,]+):(%-?%d+)') do
            mark_w.w[n] = tonumber(w)
          end
        end
      elseif b then
        if b.bucket and not win then
          local zz = tonumber(x) / 1000 + at
          if zz > -b.fill then
            b.z = zz
          end
          b.e = tonumber(y) / 1000 + at
          b.rec = true
        elseif not b.bucket and win then
          -- A window's index means something for its length and origin
          -- only. A record whose window ends after the key's expiry was
          -- written for another (a band redefined under its name): its
          -- units count as the current window used.
          local w, u = tonumber(x), tonumber(y)
          if w >= b.cur then
            if win_start(b, w + 1, true) <= expiry + 1000000 then
              b.w, b.u = w, u
            elseif u > 0 then
              b.u = b.n
            end
          end
          b.rec = true
        end
      elseif ext then
        if win then
          ext[#ext + 1] = {name = name, bucket = false, w = tonumber(x), u = tonumber(y)}
        else
          ext[#ext + 1] = {name = name, bucket = true, z = tonumber(x) / 1000 + at, e = tonumber(y) / 1000 + at}
        end
      end
    end
  end
end
if rest and rest ~= '' then
  load_records(rest, bands, base, extra, format1)
  if ebounds then
    for i = 1, nbands + #extra do
      local b = bands[i] or extra[i - nbands]
      if b.bucket and ebounds[b.name] and ebounds[b.name] <= b.e + same_us then
        b.eb = ebounds[b.name]
      end
    end
  end
end
if rec_z then
  -- A Limit's one record, written without its name: the band named
  -- permits, or kept as a record not in force.
  local b = bands[1]
  if nbands > 1 or (b and b.name ~= 'permits') then
    b = nil
    for j = 1, nbands do
      if bands[j].name == 'permits' then
        b = bands[j]
      end
    end
  end
  if b and b.bucket then
    if rec_z > -b.fill then
      b.z = rec_z
    end
    b.e = rec_e
    b.rec = true
  elseif not b then
    extra[#extra + 1] = {name = 'permits', bucket = true, z = rec_z, e = rec_e}
  end
end
if pause_at then
  -- A pause ends with empty buckets: one without a record (a band added
  -- since) is empty at the pause's end, as pause.lua left the others.
  for i = 1, nbands do
    local b = bands[i]
    if b.bucket and not b.rec and b.z < pause_at then
      b.z = pause_at
    end
  end
end
if pause < 0 then
  pause = 0
end
-- A lost key's horizon (ARGV[2]'s "!"): when the key has no state, or one
-- numbered before seq (Redis lost the key: restarted empty, or a replica
-- promoted before it had the latest writes), every bucket is empty until
-- now + h2, after the slots it had granted the caller. lost_applied: it
-- applied, so the state is written whatever else the call does.
local lost_applied = false
if lost_h2 and not (raw and (not lost_seq or seq >= lost_seq)) then
  for i = 1, nbands do
    local b = bands[i]
    if b.bucket and b.z < lost_h2 then
      b.z = lost_h2
    end
  end
  lost_applied = true
end

-- A window band's window i starts (i - cur) * len - rem µs from now (rem:
-- how far into the current window now is).



-- snap returns q (µs relative to now, on the grid) moved up to the
-- lattice's next instant of a rank the caller takes: one not held (a
-- group), or its own on both lattices (a member).
local snap = nil
if lattice then
  snap = function(q)
    local l = lattice
    local w = math.floor((q + now_frac) * 1000 + 0.5) - now_ns -- tell(q)
    local pos = (l.phase + w) % l.period
    local idx = math.ceil(pos / l.u)
    if idx * l.u < pos then
      idx = idx + 1
    end
    if member then
      while idx % l.n ~= member % l.n or idx % l.m ~= member % l.m do
        idx = idx + 1
      end
    else
      while l.held[idx % fleet_n] do
        idx = idx + 1
      end
    end
    return (w + idx * l.u - pos) / 1000
  end
end

-- earliest returns the earliest slot at or after s (µs relative to now) at
-- which every band can take cost (indexed by unit), on the ns grid; the
-- window each window band would use; the exact time the slot was rounded
-- up from, at which the buckets are charged (take); and what set the slot,
-- the binding band: its index, -1 for the pause (s being the pause, or a
-- bucket the pause emptied and nothing queued beyond), 0 for nothing (the
-- slot is s). A band charged nothing holds nobody. It returns nil when a
-- window band can never take the cost at the share (a share's N_k below
-- the cost in every window), or a bucket band at a share is charged more
-- than the share's burst: a member's B_k (ARGV[2]'s "m" form), or b less
-- the held members' B_k for the group on Redis.
local function earliest(s, cost)
  local idx = nil
  local q = grid(s)
  local by = 0
  if s > 0 and s == pause then
    by = -1
  end
  for _ = 1, 8 do
    local moved = false
    for i = 1, nbands do
      local b = bands[i]
      local c = cost[b.unit] or 0
      if c > 0 then
        if b.bucket then
          if (member or held) and c > b.eff * (1 + 1e-9) and not (lattice and lattice.band == b) then
            -- A share cannot take a cost above its burst: a member's B_k
            -- (pacing locally), or what the held members leave the group
            -- on Redis. Granted once its bucket had filled for the
            -- difference, the cost went out at one instant, over that
            -- burst, and the others, blind to it, bursting at once held
            -- more than the whole burst (the shares add up to the limit
            -- only while each keeps to its own). Never at this share, as a
            -- window's N_k below the cost: the caller waits for Redis or a
            -- share (TestMemberCostOverItsBurst, TestGroupCostOverItsBurst).
            -- (A lattice's band spaces the members' instants instead.)
            return nil
          end
          -- Moved only when the grid moves: t may lie a hair above its own
          -- ns (float noise), which grid(t) does not pass.
          local t = b.z + c * b.upp
          local gt = grid(t)
          if gt > q then
            s, q, moved = t, gt, true
            if pause > 0 and b.z <= pause then
              by = -1
            else
              by = i
            end
          end
        else
          local w = win_of(b, q)
          if w < b.w then
            -- First come, first served: nothing goes into a window
            -- before the latest one holding reservations.
            w = b.w
          end
          -- The first window from w with room. Units are sums of decimals:
          -- 18.267 - 0.267 may come out as 18.000000000000004. A part in
          -- 1e9 of N is rounding, not use. A share's room repeats every n
          -- windows.
          local tries = 0
          while (w == b.w and b.u or 0) + c > cap(b, w) * (1 + 1e-9) do
            w = w + 1
            tries = tries + 1
            if tries > room_period then
              return nil
            end
          end
          local ws = win_start(b, w)
          if not ws then
            -- Past the calendar table's end (a queue a year deep): a
            -- slot beyond any queue allowed (max_queue_us), so the call
            -- is refused as one, never granted into an unknown window.
            local far = 2 * max_queue_us
            return far, nil, far, i
          end
          local gws = grid(ws)
          if gws > q then
            s, q, moved = ws, gws, true
            by = i
          end
          idx = idx or {}
          idx[i] = w
        end
      end
    end
    if not moved and lattice and (cost[lattice.band.unit] or 0) > 0 then
      local t = snap(q)
      local gt = grid(t)
      if gt > q then
        s, q, moved = t, gt, true
        for j = 1, nbands do
          if bands[j] == lattice.band then
            by = j
          end
        end
      else
        s = q -- charged at the slot itself
      end
    end
    if not moved then
      break
    end
  end
  return q, idx, s, by
end

-- take commits a reservation of cost at slot q, from earliest: each
-- bucket is charged at the exact time s the slot was rounded up from
-- (x/time/rate's ReserveN at s: the balance at s, less c), and its last
-- event is the slot.
local function take(q, cost, idx, s)
  s = s or q
  if lattice and mark_p and pause > 0 and (cost[lattice.band.unit] or 0) > 0 then
    local ranks = lattice.period / lattice.u
    if not mark_l then
      mark_l = {u = lattice.u, n = ranks}
    elseif mark_l.u ~= lattice.u or mark_l.n ~= ranks then
      mark_l = {u = 0, n = 0}
    end
  end
  for i = 1, nbands do
    local b = bands[i]
    local c = cost[b.unit] or 0
    if c > 0 then
      if b.bucket then
        b.z, b.e, b.eb = charge(b.z, b.e, b.eb, b.fill, c * b.upp, q, s)
      else
        if idx[i] > b.w then
          b.w, b.u = idx[i], 0
        end
        b.u = b.u + c
      end
      b.rec = true
    end
  end
end



-- need_at_least: an expiry (µs relative to now) the next save sets at
-- least, whatever the bands need (pause.lua: records not in force moved).
local need_at_least = nil

-- save writes the state back, in the format ARGV[2] asks (3 unless told),
-- and returns it. The expiry is set only when it must move later, one to
-- two seconds past what the state needs: until every bucket is full and
-- every window used is over, and the pause ends.
local function save()
  local need = pause
  for i = 1, nbands do
    local b = bands[i]
    if b.bucket then
      if b.z + b.fill > need then
        need = b.z + b.fill
      end
    else
      local over = win_start(b, b.w + 1, true)
      if b.u > 0 and over > need then
        need = over
      end
    end
  end
  need = need + 1000000
  if need_at_least and need_at_least > need then
    need = need_at_least
  end
  local keep = expiry >= need
  if not keep then
    expiry = need + 1000000
  end
  local value
  -- A Limit's state: its one bucket named permits and nothing else, in
  -- force, or kept as a record not in force by a call with no band (the
  -- policy "": Rewrite, an operator's Pause or Resume).
  local b = bands[1]
  if nbands == 0 then
    b = extra[1]
  end
  local lone = nbands + #extra == 1 and b.bucket and b.name == 'permits' and not mark_p and not mark_s and not b.eb
  if write_fmt > 1 and lone and pause <= 0 and not pause_at then
    -- A Limit with no pause written (head.lua's limit_state).
    local x
    if keep then
      x = math.floor((expiry + now_frac) / 1000) -- stored rounded down to a ms after now_us
    else
      x = math.ceil(expiry / 1000)
    end
    value = limit_state(write_fmt, b.z, b.e, x, seq, has_cfg)
  end
  if not value then
    -- numfmt returns the format of v (ns) in a state: whole ns without
    -- decimals, else to a thousandth of a ns.
    local function numfmt(v)
      local r = math.floor(v + 0.5)
      if v - r < 0.0005 and r - v < 0.0005 then
        return '%d', r
      end
      return '%.3f', v
    end
    -- v1: format 1 writes bucket times always with three decimals, a
    -- window's index without a "w".
    local v1 = write_fmt == 1
    local function bucket_text(z, e)
      if v1 then
        return string.format(' %.3f %.3f', (z + now_frac) * 1000, (e + now_frac) * 1000)
      end
      local f1, v1_ = numfmt((z + now_frac) * 1000)
      local f2, v2 = numfmt((e + now_frac) * 1000)
      return string.format(' ' .. f1 .. ' ' .. f2, v1_, v2)
    end
    local function record_text(x)
      if x.bucket then
        return ' ' .. x.name .. bucket_text(x.z, x.e)
      end
      return string.format(v1 and ' %s %d %.17g' or ' %s w%d %.17g', x.name, x.w, x.u)
    end
    local text = ''
    if not v1 and lone then
      -- A Limit: its record without the name (format 2, and format 3's
      -- general form).
      text = bucket_text(b.z, b.e)
    else
      for i = 1, nbands do
        text = text .. record_text(bands[i])
      end
      -- The records of bands not in force, as they were (their fill or
      -- window is unknown here: the expiry as set covers them, as it never
      -- moves earlier).
      for i = 1, #extra do
        text = text .. record_text(extra[i])
      end
      -- The reserved records (the previous release drops those it does not
      -- know: no band is so named).
      if mark_p then
        if v1 then
          text = text .. string.format(' ~p %d %.3f', mark_p.q, (mark_p.e + now_frac) * 1000)
        else
          local f, v = numfmt((mark_p.e + now_frac) * 1000)
          text = text .. string.format(' ~p %d ' .. f, mark_p.q, v)
        end
        if mark_l then
          text = text .. string.format(' ~l %d %d', mark_l.u, mark_l.n)
        end
        if mark_w and mark_w.q == mark_p.q then
          local names = {}
          for n in pairs(mark_w.w) do
            names[#names + 1] = n
          end
          table.sort(names) -- by name: the same state on every run
          for j = 1, #names do
            names[j] = string.format('%s:%d', names[j], mark_w.w[names[j]])
          end
          text = text .. string.format(' ~w %d ', mark_w.q) .. (#names > 0 and table.concat(names, ',') or '-')
        end
      end
      if mark_s then
        text = text .. ' ~s ' .. mark_s[1] .. ' ' .. mark_s[2]
      end
      -- The buckets' bounds as "~e" records (KEYS[1]).
      for i = 1, nbands + #extra do
        local x = bands[i] or extra[i - nbands]
        if x.bucket and x.eb then
          if v1 then
            text = text .. string.format(' ~e %s %.3f', x.name, (x.eb + now_frac) * 1000)
          else
            local f, v = numfmt((x.eb + now_frac) * 1000)
            text = text .. string.format(' ~e %s ' .. f, x.name, v)
          end
        end
      end
    end
    -- The pause in force, or one that has ended (kept: see pause_at), or 0.
    local fp, p = '%d', 0
    if pause > 0 then
      fp, p = numfmt((pause + now_frac) * 1000)
    elseif pause_at then
      fp, p = numfmt((pause_at + now_frac) * 1000)
    end
    if write_fmt == 1 then
      local x
      if keep then
        x = math.floor((expiry + now_frac) * 1000)
      else
        x = math.ceil(expiry / 1000) * 1000000
      end
      p = 0 -- written with three decimals, as it is
      if pause > 0 then
        p = (pause + now_frac) * 1000
      elseif pause_at then
        p = (pause_at + now_frac) * 1000
      end
      value = string.format('1 %d %d %d %.3f %d', now_us, x, seq, p, has_cfg) .. text
    else
      local x
      if keep then
        -- The expiry as set stays: stored rounded down to a ms after now_us.
        x = math.floor((expiry + now_frac) / 1000)
      else
        x = math.ceil(expiry / 1000)
      end
      if write_fmt == 3 then
        value = struct.pack('<BI7I6I6d', 208 + has_cfg, now_us, x, seq, p) .. text
      elseif has_cfg == 1 then
        value = string.format('%d %d %d c' .. fp, now_us, x, seq, p) .. text
      else
        value = string.format('%d %d %d ' .. fp, now_us, x, seq, p) .. text
      end
    end
  end
  if keep then
    redis.call('SET', KEYS[1], value, 'KEEPTTL')
  else
    redis.call('SET', KEYS[1], value, 'PX', math.ceil(expiry / 1000))
  end
  return value
end






-- fair is the turn of a tenant in a lane, set by fair.lua in the fair
-- script, nil in every other.
local fair = nil
