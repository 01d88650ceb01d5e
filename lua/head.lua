-- head.lua: the first part of every script built on core.lua (lua.go puts
-- it in front): the call's environment (ARGV[1] and ARGV[2]: the deadline,
-- the clock, the format to write, a lost key's horizon, the calendar tables
-- and the share) and the few helpers of the rule that both reserve.lua's
-- way for a Limit (fast.lua) and the general engine (core.lua) use, so
-- that each is written once. core.lua's header documents the KEYS and ARGV
-- of every script built on it.

-- struct: Redis's struct library (Redis, internal/luastore and the Python
-- client's store have it); where a server has none (miniredis, the demos'
-- embedded Redis), the little of it these scripts use, in Lua: "<" then
-- B, H, I<n>, i<n> (n <= 8, integers within 2^53), d and c0.
local struct = rawget(_G, 'struct')
if not struct then
  local sizes = {B = 1, H = 2, d = 8}
  local function ints(fmt, pos)
    local c = string.sub(fmt, pos, pos)
    local n = sizes[c]
    local j = pos + 1
    if c == 'I' or c == 'i' or c == 'c' then
      local d = string.match(fmt, '^%d+', j)
      n = tonumber(d)
      j = j + #d
    end
    return c, n, j
  end
  local function put(v, n, signed)
    -- A negative number in two's complement: -v - 1's bytes, inverted.
    local neg = signed and v < 0
    if neg then
      v = -v - 1
    end
    local out = {}
    for k = 1, n do
      local b = v % 256
      out[k] = neg and 255 - b or b
      v = math.floor(v / 256)
    end
    return string.char(unpack(out, 1, n))
  end
  local function double(x)
    if x ~= x then
      return '\0\0\0\0\0\0\248\127'
    end
    local sign = 0
    if x < 0 or (x == 0 and 1 / x < 0) then
      sign, x = 128, -x
    end
    if x == math.huge then
      return '\0\0\0\0\0\0\240' .. string.char(127 + sign)
    end
    local m, e = math.frexp(x) -- x = m * 2^e, 0.5 <= m < 1
    local mant, ex
    if x == 0 then
      mant, ex = 0, 0
    elseif e + 1022 < 1 then
      mant, ex = math.ldexp(m, e + 1074), 0 -- subnormal
    else
      mant, ex = (m * 2 - 1) * 2 ^ 52, e + 1022
    end
    local lo = put(mant % 2 ^ 48, 6)
    local hi = math.floor(mant / 2 ^ 48) + (ex % 16) * 16
    return lo .. string.char(hi, math.floor(ex / 16) + sign)
  end
  local function undouble(data, at)
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(data, at, at + 7)
    local sign = b8 >= 128 and -1 or 1
    local ex = (b8 % 128) * 16 + math.floor(b7 / 16)
    local mant = (((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 65536 + b2 * 256 + b1
    if ex == 2047 then
      return mant == 0 and sign * math.huge or 0 / 0
    elseif ex == 0 then
      return sign * math.ldexp(mant, -1074)
    end
    return sign * math.ldexp(mant + 2 ^ 52, ex - 1075)
  end
  struct = {}
  function struct.pack(fmt, ...)
    local args, out, a, pos = {...}, {}, 1, 2
    while pos <= #fmt do
      local c, n, j = ints(fmt, pos)
      local v = args[a]
      if c == 'd' then
        out[#out + 1] = double(v)
      elseif c == 'c' then
        out[#out + 1] = v
      else
        out[#out + 1] = put(v, n, c == 'i')
      end
      a, pos = a + 1, j
    end
    return table.concat(out)
  end
  function struct.unpack(fmt, data, at)
    local out, pos, at = {}, 2, at or 1
    while pos <= #fmt do
      local c, n, j = ints(fmt, pos)
      if c == 'c' then
        n = table.remove(out)
        out[#out + 1] = string.sub(data, at, at + n - 1)
      elseif #data < at + n - 1 then
        error('data string too short')
      elseif c == 'd' then
        out[#out + 1] = undouble(data, at)
      else
        local neg = c == 'i' and string.byte(data, at + n - 1) >= 128
        local v = 0
        for k = at + n - 1, at, -1 do
          local b = string.byte(data, k)
          v = v * 256 + (neg and 255 - b or b)
        end
        out[#out + 1] = neg and -v - 1 or v
      end
      at, pos = at + n, j
    end
    out[#out + 1] = at
    return unpack(out)
  end
end

local max_queue_us = 30 * 365 * 24 * 3600 * 1000000 -- reserve.ErrQueueTooLong
local same_us = 0.0005 -- slots lie on a ns grid: times within half a ns are one instant
local huge = math.huge


-- The environment (ARGV[2]): the clock, the format to write, the calendar
-- tables and the share. "1", the common case, is all defaults.
local server_time = true
local now_us, now_frac, now_ns = 0, 0, 0
local write_fmt = 3
local share_arg, cal_arg = ARGV[2], nil
-- A lost key's horizon (ARGV[2]'s "!<h2_us>[:<seq>] "), applied below.
local lost_h2, lost_seq = nil, nil
if share_arg ~= '1' then
  if string.byte(share_arg, 1) == 116 then -- 't': a client clock
    local us, ns, rest = string.match(share_arg, '^t(%d+):(%d+) (.+)$')
    if not us then
      return redis.error_reply('PACER_ARG bad clock')
    end
    server_time, now_us, now_ns = false, tonumber(us), tonumber(ns)
    now_frac = now_ns / 1000
    share_arg = rest
  end
  if string.byte(share_arg, 1) == 102 then -- 'f'
    local f, rest = string.match(share_arg, '^f(%d) (.+)$')
    if f == '1' then
      write_fmt = 1
    elseif f == '2' then
      write_fmt = 2
    elseif f ~= '3' then
      return redis.error_reply('PACER_ARG bad state format')
    end
    share_arg = rest
  end
  if string.byte(share_arg, 1) == 33 then -- '!'
    local h2, q, rest = string.match(share_arg, '^!(%d+):?(%d*) (.+)$')
    if not h2 then
      return redis.error_reply('PACER_ARG bad lost horizon')
    end
    lost_h2, lost_seq, share_arg = tonumber(h2), tonumber(q), rest
  end
  if string.byte(share_arg, 1) == 99 then -- 'c'
    local c, rest = string.match(share_arg, '^c(%S+) (.+)$')
    if not c then
      return redis.error_reply('PACER_ARG bad calendar tables')
    end
    cal_arg, share_arg = c, rest
  end
end
if server_time then
  local tm = redis.call('TIME')
  now_us = tm[1] * 1000000 + tm[2]
end

-- The deadline (ARGV[1]): a call Redis runs after it (Redis stalled:
-- frozen, a long fork, and its caller gave up on it) is refused and
-- changes nothing. Its caller may have gone on without it, on a view of
-- the fleet that is stale by now.
if ARGV[1] ~= '' then
  local d = tonumber(ARGV[1])
  if not d or d < 0 or d == huge or d ~= math.floor(d) then -- (NaN ~= NaN)
    return redis.error_reply('PACER_ARG bad deadline')
  end
  if server_time and now_us > d * 1000 then
    return redis.error_reply('PACER_STALE the call ran after its deadline')
  end
end

-- grid returns s (µs relative to now) rounded up to a whole ns of absolute
-- time: slots lie on a ns grid, so the slot a reply tells (whole ns) is the
-- slot itself, and adjust.lua can compare slots exactly.
local function grid(s)
  local x = (s + now_frac) * 1000
  -- Float noise grows with the number (2^-52 of it): a time a hair above a
  -- whole ns is that ns.
  return math.ceil(x - 1e-3 - (x < 0 and -x or x) * 4e-16) / 1000 - now_frac
end

-- charge applies a reservation to a token bucket: x/time/rate's ReserveN
-- at s, the exact time (µs relative to now) its slot q (on the grid) was
-- rounded up from. The bucket's zero time is z, its last event e, its
-- bound eb (nil: none), its fill f (its burst at the share, in µs), and the
-- reservation takes cu µs of it (cost / rate at the share). It returns the
-- new z, e and eb.
local function charge(z, e, eb, f, cu, q, s)
  -- At a share, the burst may be under the cost: charged from its own
  -- spacing then, or each slot would leave a debt behind it.
  if f < cu then
    f = cu
  end
  if z < s - f then
    z = s - f
  end
  -- The last event never moves back: a reservation landing in a hole left
  -- by a cancel gets an earlier slot than a live one, and adjust.lua must
  -- still see the latest slot, or it would give back more than was
  -- reserved (x/time/rate sets lastEvent regardless).
  local was = e
  if q > was then
    e = q
  end
  -- A cancel of the latest reservation moves the last event back by its
  -- cost's time (adjust.lua). When this reservation is the latest but its
  -- slot lies later than the previous last event plus its cost's time
  -- (another band, a window, a pause or a lattice set it, or the bucket
  -- was not empty), that would land before the previous reservation's
  -- slot, and a later cancel of an earlier one would count too short a
  -- distance to the last event and give back what later ones built on.
  -- The bound keeps it at or after the previous last event ("~e", KEYS[1]),
  -- while that is still ahead (a cancel moves no last event into the
  -- past): a burst granted at once, or a cold key, writes none.
  local tol = 0.001 + same_us
  if q >= was - tol and e - cu < was - tol and was > same_us and not (eb and eb >= was) then
    eb = was
  end
  return z + cu, e, eb
end

-- limit_state returns a Limit's state (one bucket named "permits", no
-- other record, no pause written: KEYS[1]) in format 3 (fmt 3), its
-- smallest form that holds it exactly, or 2 (fmt 2), from its record z, e
-- (µs relative to now), its expiry x (ms after now_us), its last number s
-- and its flag c; nil for a state format 3's Limit forms cannot hold (a
-- general form then).
local function limit_state(fmt, z, e, x, s, c)
  z, e = (z + now_frac) * 1000, (e + now_frac) * 1000
  -- A time within half a thousandth of a whole ns is that ns.
  local rz, re = math.floor(z + 0.5), math.floor(e + 0.5)
  local wz = z - rz < 0.0005 and rz - z < 0.0005
  local we = e - re < 0.0005 and re - e < 0.0005
  if fmt == 2 then
    -- Whole ns without decimals, else to a thousandth.
    local p = c == 1 and 'c0' or '0'
    if wz and we then
      return string.format('%d %d %d ' .. p .. ' %d %d', now_us, x, s, rz, re)
    end
    return string.format('%d %d %d ' .. p .. (wz and ' %d' or ' %.3f') .. (we and ' %d' or ' %.3f'), now_us, x, s, wz and rz or z, we and re or e)
  end
  if wz and we then
    if rz == 0 and re == 0 and s < 256 and x < 65536 then
      return struct.pack('<BI7HB', 160 + c, now_us, x, s)
    end
    if rz < 140737488355328 and rz > -140737488355328 and re < 140737488355328 and re > -140737488355328
        and s < 4294967296 and x < 4294967296 then
      return struct.pack('<BI7I4I4i6i6', 176 + c, now_us, x, s, rz, re)
    end
  end
  if s < 281474976710656 and x < 4294967296 then
    return struct.pack('<BI7I4I6dd', 192 + c, now_us, x, s, z, e)
  end
  return nil
end

-- limit_read reads a state in one of format 3's Limit forms: its write
-- time t (Unix µs), expiry x (ms after t), last number s, record z, e (ns
-- after t) and flag c; nil if raw is not one.
local function limit_read(raw)
  local b0 = string.byte(raw, 1)
  if not b0 or b0 < 160 or b0 >= 208 then
    return nil
  end
  local c, n = b0 % 2, #raw
  local form = b0 - c
  if form == 160 and n == 11 then
    local t, x, s = struct.unpack('<I7HB', raw, 2)
    return t, x, s, 0, 0, c
  elseif form == 176 and n == 28 then
    local t, x, s, z, e = struct.unpack('<I7I4I4i6i6', raw, 2)
    return t, x, s, z, e, c
  elseif form == 192 and n == 34 then
    local t, x, s, z, e = struct.unpack('<I7I4I6dd', raw, 2)
    return t, x, s, z, e, c
  end
  return nil
end

-- reply1 returns reserve.lua's reply for one request: its wait (ns) and
-- number, the state, the stored limit and the binding band.
local function reply1(w, s, state, stored, by)
  return struct.pack('<I7HI4i8i8I4c0I4c0c0', now_us, now_ns, 1, w, s, #state, state, #stored, stored, by)
end
