-- resume.lua: end the key group's pause now (cmd/pacer resume). A pause
-- left every bucket empty at its end; resumed, a bucket is empty now, or at
-- the last slot granted if that is later (slots granted stay granted).
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- Reply      now_us, now_ns (see reserve.lua), and integer ns from now until
--            the pause that was in force would have ended (0: none)
-- Errors     PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG.

local was = pause
pause = 0
for i = 1, nbands do
  local b = bands[i]
  if b.bucket then
    local empty = math.max(0, b.e)
    if b.z > empty then
      b.z = empty
    end
  end
end
save()
return {now_us, now_ns, ns(was)}
