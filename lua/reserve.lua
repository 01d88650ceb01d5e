-- reserve.lua: reserve permits for one or more requests on one bucket, first
-- come first served: the requests are served in ARGV order, each exactly as if
-- it were a call of its own (x/time/rate ReserveN), so a batch of m requests
-- gives the same slots as m calls one after the other. A request that would
-- wait too long is refused and changes nothing; the ones after it still run.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  m, the number of requests, integer >= 1
-- ARGV[4+2i]  request i's n, permits to reserve, integer 1..burst
-- ARGV[5+2i]  request i's max_wait_us: integer µs; if its wait would be
--             longer, it is refused. -1 means no maximum.
-- Reply    flat array, five entries per request, in ARGV order:
--            status    1 granted, 0 refused (wait too long), -1 refused (the
--                      queue would be over 30 years long, ErrQueueTooLong)
--            wait_us   integer µs from now to the slot, rounded up (refused:
--                      the wait it would have needed; 0 for status -1)
--            slot_us   the slot, integer Unix µs (string; '' if refused)
--            slot_frac its fraction of a µs (string; '' if refused)
--            seq       the reservation's number on this key (integer; 0 if
--                      refused); with the slot, it identifies the reservation
--                      to cancel.lua

local m = tonumber(ARGV[5])
if not m or m < 1 or m ~= math.floor(m) or #ARGV ~= 5 + 2 * m then
  return redis.error_reply('ERR pacer: want m, then n and max_wait_us for each of m requests')
end
for i = 1, m do
  if not n_arg(4 + 2 * i) or not tonumber(ARGV[5 + 2 * i]) then
    return redis.error_reply('ERR pacer: n must be between 1 and burst')
  end
end

-- First pass, no writes: each request's slot, or why it is refused, straight
-- into the reply (five entries per request; the slot strings come after).
local new_z = z
local out = {}
local granted, last_slot = 0, nil
for i = 1, m do
  local o = 5 * (i - 1)
  local next_z, slot = take(new_z, n_arg(4 + 2 * i))
  if not next_z then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = -1, 0, '', '', 0
  else
    local wait_us = math.ceil(slot)
    local max_wait_us = tonumber(ARGV[5 + 2 * i])
    if max_wait_us >= 0 and wait_us > max_wait_us then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, wait_us, '', '', 0
    else
      new_z = next_z
      granted = granted + 1
      last_slot = slot
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 1, wait_us, slot, '', 0
    end
  end
end

-- Second pass: one write for all the granted requests, then their slots
-- and numbers.
if granted > 0 then
  local seq = commit(new_z, last_slot, granted)
  for i = 1, m do
    local o = 5 * (i - 1)
    if out[o + 1] == 1 then
      out[o + 3], out[o + 4] = abs(out[o + 3])
      out[o + 5] = seq
      seq = seq + 1
    end
  end
end
return out
