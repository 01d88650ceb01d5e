-- tools.lua: helpers of the operations other than reserve.lua's, put
-- after core.lua (lua.go), so that a reservation does not make closures it
-- never calls.

-- finite reports whether x is a number other than NaN and the infinities
-- (every comparison with NaN is false: a check "x < 0" passes it).
local function finite(x)
  return x ~= nil and x == x and x ~= huge and x ~= -huge
end

-- tell returns a slot on the grid as ns from now: now_ns + tell(q) is the
-- slot's whole ns, free of float noise.
local function tell(q)
  return math.floor((q + now_frac) * 1000 + 0.5) - now_ns
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

-- ns returns s (µs relative to now) in integer ns: rounded up, or toward
-- zero when negative (a slot already passed), ignoring float noise far
-- below a ns.
local function ns(s)
  if s < 0 then
    return -math.floor(-s * 1000 + 1e-6)
  end
  return math.ceil(s * 1000 - 1e-6)
end

-- resumed returns how much earlier (µs) a resume moved reservation number
-- q (a string; see "~s"), 0 if it did not.
local function resumed(q)
  if not mark_s then
    return 0
  end
  local a, b = string.match(mark_s[1], '^(%d+):(%d+)$')
  q = tonumber(q)
  if q and a and q > tonumber(a) and q <= tonumber(b) then
    return tonumber(mark_s[2]) / 1000
  end
  return 0
end

-- cost_arg reads one request's costs, one decimal >= 0 per unit, from
-- ARGV[i...] into a table indexed by unit; nil if one is not such a number.
local function cost_arg(i)
  local cost = {}
  for u = 1, nunits do
    local c = ARGV[i + u - 1]
    if c == '1' then
      cost[u] = 1
    else
      c = tonumber(c)
      if not c or c < 0 or c ~= c or c == huge then
        return nil
      end
      cost[u] = c
    end
  end
  return cost
end

-- duration is how long a request of cost takes on the band that takes
-- longest to refill or renew it (cost / rate, or cost * window length /
-- N), at the whole rate, in µs: a fair request's part of its lane's turns
-- (fair.lua, and adjust.lua when it is settled).
local function duration(cost)
  local d = 0
  for i = 1, nbands do
    local b = bands[i]
    local c = cost[b.unit] or 0
    local x
    if b.bucket then
      x = c * 1000000 / b.rate
    else
      x = c * b.len / b.n
    end
    if x > d then
      d = x
    end
  end
  return d
end

-- publish tells the fleet's Limiters that the key changed in a way they
-- cannot see in their own replies (op: "pause", "resume"), on the channel
-- "<prefix>{limiters}:events": "<op> <KEYS[1]> <state>", the state as
-- written. They take it as a reply's (reserve's events.go): sleepers behind
-- a pause learn its end, or its resume, at once. A Redis that refuses
-- PUBLISH (an ACL without it) changes nothing else: they learn it at their
-- next read.
local function publish(op, state)
  local prefix = string.match(KEYS[1], '^(.-){')
  if prefix then
    redis.pcall('PUBLISH', prefix .. '{limiters}:events', op .. ' ' .. KEYS[1] .. ' ' .. state)
  end
end
