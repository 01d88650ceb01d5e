-- pause.lua: grant no slot on the key group before now + d (the provider
-- answered 429 with Retry-After d). Every bucket is empty when the pause
-- ends, so callers resume at the rate instead of spending a stored burst.
-- A shorter pause than one already in force changes nothing.
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- ARGV[opi]  d_us, the pause, integer µs > 0
-- Reply      now_us, now_ns (see reserve.lua), and integer ns from now until
--            the pause in force ends
-- Errors     PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG.

local d = tonumber(ARGV[opi])
if not d or d <= 0 then
  return redis.error_reply('PACER_ARG pause must be positive')
end
if d > pause then
  pause = d
end
for i = 1, nbands do
  local b = bands[i]
  if b.bucket and b.z < pause then
    b.z = pause
  end
end
save()
return {now_us, now_ns, ns(pause)}
