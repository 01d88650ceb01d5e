-- bucket.lua: the state of one bucket, shared by every script (lua.go puts it
-- in front of each operation's file, so each script stays self-contained).
--
-- The model is golang.org/x/time/rate's Limiter, kept as one timestamp, GCRA
-- style: z is the time at which the bucket's balance is (or was) zero, Guava's
-- nextFreeTicket. The balance at time t is min(burst, (t - z) * rate); a
-- reservation of n permits moves z to max(z, t - burst/rate) + n/rate and waits
-- until z if z > t.
--
-- KEYS[1]  the bucket, a hash. Fields (absolute times, Unix microseconds):
--            tat, tatf  z: integer part (written with %d) and fraction of a µs
--            ev, evf    slot of the last reservation granted (x/time/rate's
--                       lastEvent), used by cancel.lua
--            pause, pausef  no slot before this time (pause.lua)
--            seq        the number of the last reservation granted (reserve.lua)
--            cx         the numbers of the last 16 reservations canceled,
--                       space-separated, so a retried cancel is a no-op
--            now        integer µs: the server time of the last write, when
--                       using server time (see "shift" below)
--          A missing key is a full bucket; the key expires once the bucket
--          would be full again (plus expiry_margin_ms), so expiry is invisible.
-- ARGV[1]  rate, permits per second, decimal (> 0)
-- ARGV[2]  burst, permits, integer (>= 1)
-- ARGV[3]  now, integer Unix µs, or "" to use Redis server TIME
-- ARGV[4]  the sub-microsecond part of now in ns (0..999); ignored when ARGV[3] is ""
-- ARGV[5...] belong to the operation.
--
-- Precision: Lua numbers are doubles, and Unix µs (~1.8e15) leave no room for a
-- fraction. So absolute times are stored as an integer plus a fraction and all
-- arithmetic is done on doubles relative to now (small numbers, exact to far
-- below a nanosecond). Integers are written with string.format('%d'), never
-- tostring(), which real Redis prints with 14 significant digits.

local expiry_margin_ms = 1000
local max_queue_us = 30 * 365 * 24 * 3600 * 1000000 -- reserve.ErrQueueTooLong

local key = KEYS[1]
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
if not rate or rate <= 0 or rate == math.huge then
  return redis.error_reply('ERR pacer: rate must be positive and finite')
end
if not burst or burst < 1 then
  return redis.error_reply('ERR pacer: burst must be at least 1')
end

local now_us, now_frac
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now_frac = 0
else
  now_us = tonumber(ARGV[3])
  now_frac = tonumber(ARGV[4]) / 1000
end

local us_per_permit = 1000000 / rate
local fill_us = burst * us_per_permit

-- rel turns a stored time (integer µs string, fraction string) into µs relative to now.
local shift -- set once the state is read, below
local function rel(whole, frac)
  return (tonumber(whole) - now_us - shift) + (tonumber(frac) or 0) - now_frac
end

-- abs splits a time relative to now into the integer and fraction strings to store.
local function abs(r)
  local x = r + now_frac
  local w = math.floor(x)
  return string.format('%d', now_us + w), string.format('%.17g', x - w)
end

-- HMGET raises WRONGTYPE before anything is written if the key is not a hash.
local state = redis.call('HMGET', key, 'tat', 'tatf', 'ev', 'evf', 'pause', 'pausef', 'cx', 'now', 'seq')

-- With server time, a clock that steps back (an NTP step, a failover to a
-- host whose clock is behind) must not turn into a debt as long as the step:
-- the stored times are read as if the step had not happened (shifted by it)
-- and written back in the new clock. With a client clock, no shift: clients
-- whose clocks disagree would then refill the bucket for each other.
shift = 0
if ARGV[3] == '' and state[8] and tonumber(state[8]) > now_us then
  shift = tonumber(state[8]) - now_us
end

-- z relative to now, never below "full" (x/time/rate caps the balance at burst).
local z = -fill_us
if state[1] then
  z = rel(state[1], state[2])
  if z < -fill_us then
    z = -fill_us
  end
end

-- save writes z and the other times given (each relative to now, or nil to
-- leave the field as it is) and the last reservation number if given, and
-- sets the expiry: the bucket is full again at z + fill_us, after which a
-- missing key reads the same.
local function save(new_z, new_ev, new_pause, new_seq)
  local tat, tatf = abs(new_z)
  local fields = {'tat', tat, 'tatf', tatf}
  if ARGV[3] == '' then
    table.insert(fields, 'now')
    table.insert(fields, string.format('%d', now_us))
  end
  if new_ev then
    local ev, evf = abs(new_ev)
    table.insert(fields, 'ev')
    table.insert(fields, ev)
    table.insert(fields, 'evf')
    table.insert(fields, evf)
  end
  if new_pause then
    local p, pf = abs(new_pause)
    table.insert(fields, 'pause')
    table.insert(fields, p)
    table.insert(fields, 'pausef')
    table.insert(fields, pf)
  end
  if new_seq then
    table.insert(fields, 'seq')
    table.insert(fields, string.format('%d', new_seq))
  end
  redis.call('HSET', key, unpack(fields))
  local ttl_ms = math.ceil((new_z + fill_us) / 1000)
  if ttl_ms < 0 then
    ttl_ms = 0
  end
  redis.call('PEXPIRE', key, string.format('%d', ttl_ms + expiry_margin_ms))
end

-- n_arg reads the permit count at ARGV[i]: 1..burst.
local function n_arg(i)
  local n = tonumber(ARGV[i])
  if not n or n < 1 or n > burst then
    return nil
  end
  return n
end

-- take returns where z moves and the slot when n more permits are reserved
-- after from_z (both relative to now), or nil if the queue would be over
-- max_queue_us long: past ~30 years, Unix µs outgrow the exact range of a
-- double.
local function take(from_z, n)
  local new_z = from_z + n * us_per_permit
  if new_z > max_queue_us then
    return nil
  end
  local slot = new_z
  if slot < 0 then
    slot = 0
  end
  return new_z, slot
end

-- commit saves z after count reservations whose last slot is last_slot, and
-- returns the number of the first of them (numbers are per key, consecutive;
-- with the slot they identify a reservation to cancel.lua).
--
-- The last event never moves back: a reservation landing in a hole left by a
-- cancel gets an earlier slot than a live one, and cancel.lua must still see
-- the latest slot, or it would give back more than was reserved
-- (x/time/rate sets lastEvent to the new slot regardless, and can).
local function commit(new_z, last_slot, count)
  local ev = last_slot
  if state[3] and rel(state[3], state[4]) > ev then
    ev = nil -- keep the stored one
  end
  local first = (tonumber(state[9]) or 0) + 1
  save(new_z, ev, nil, first + count - 1)
  return first
end
