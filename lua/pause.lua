-- pause.lua: grant no slot before now + d (the provider answered 429 with
-- Retry-After d). The bucket is empty when the pause ends, so callers resume
-- at the rate instead of spending a stored burst. A shorter pause than one
-- already in force changes nothing.
--
-- KEYS[1]  the bucket (see bucket.lua)
-- ARGV[1..4] rate, burst, now (see bucket.lua)
-- ARGV[5]  d_us, the pause, integer µs > 0
-- Reply    integer µs from now until the bucket's balance is back at zero
--          (the earliest slot the next reservation can be given, minus its own
--          permits' time)

local d_us = tonumber(ARGV[5])
if not d_us or d_us <= 0 then
  return redis.error_reply('ERR pacer: pause must be positive')
end

local until_rel = d_us
local new_z = z
if until_rel > new_z then
  new_z = until_rel
end
local new_pause = until_rel
if state[5] then
  local old = rel(state[5], state[6])
  if old > new_pause then
    new_pause = old
  end
end

save(new_z, nil, new_pause)
return math.ceil(new_z)
