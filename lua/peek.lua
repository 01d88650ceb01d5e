-- peek.lua: read a key group without changing it: the wait a reservation of
-- the given costs would have now, the pause, and each band's state.
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- ARGV[opi...]  one cost per unit (decimal >= 0)
-- Reply    now_us, now_ns (see reserve.lua), wait_ns (rounded up; -1: never
--          at the share), pause_ns
--          (until the pause ends; 0 if none), then four entries per band in
--          force, in its order:
--            name
--            value     a bucket's balance now (at most its burst, negative
--                      while reservations are queued), or a window's units
--                      reserved in its latest window, as a decimal string
--            wait_ns   this band's own wait for its cost
--            end_ns    a window's latest window end, ns from now (0 for a
--                      bucket)
-- Errors   PACER_ARG, PACER_EXCEEDS, PACER_WRONGTYPE, PACER_CONFIG.

if nbands < 1 then
  return redis.error_reply('PACER_ARG need at least one band')
end
local cost = cost_arg(opi)
if not cost then
  return redis.error_reply('PACER_ARG bad cost')
end
if not fits(cost) then
  return redis.error_reply('PACER_EXCEEDS a cost is above its band\'s burst or N')
end
-- never: -1 when a band can never take the cost at the share (a window's
-- N_k below it, or a member's burst B_k below it: core.lua's earliest).
local function wait_of(s)
  if not s then
    return -1
  end
  return tell(s)
end
local out = {now_us, now_ns, wait_of((earliest(pause, cost))), ns(pause)}
local all, nall = bands, nbands
for i = 1, nall do
  local b = all[i]
  bands, nbands = {b}, 1
  local s = earliest(pause, cost)
  bands, nbands = all, nall
  out[#out + 1] = b.name
  if b.bucket then
    out[#out + 1] = string.format('%.17g', -b.z / b.upp)
    out[#out + 1] = wait_of(s)
    out[#out + 1] = 0
  else
    out[#out + 1] = string.format('%.17g', b.u)
    out[#out + 1] = wait_of(s)
    out[#out + 1] = ns(win_start(b, b.w + 1, true))
  end
end
return out
