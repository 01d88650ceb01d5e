-- pause.lua: grant no slot on the key group before now + d (the provider
-- answered 429 with Retry-After d). Every bucket is empty when the pause
-- ends, so callers resume at the rate instead of spending a stored burst:
-- the bands in force, the records of bands not in force (a pause belongs to
-- the key, not to a policy: k may be 0), and, through core.lua's rule for
-- recordless buckets, any band added later. A shorter pause than one
-- already in force changes nothing. A new pause records where the schedule
-- stood ("~p", see core.lua), so that resume.lua can move the reservations
-- granted during it.
--
-- KEYS, ARGV[1..opi-1]: see core.lua.
-- KEYS[3]    optional: the key's history (an operator's pause,
--            admin.Client.Pause): the pause is recorded there, by this
--            call (note.lua)
-- ARGV[opi]  d_us, the pause, integer µs > 0
-- With KEYS[3]:
-- ARGV[opi+1] the op to record ("pause 1m30s")
-- ARGV[opi+2...] who, why, keep, check: see note.lua
-- Reply      now_us, now_ns (see reserve.lua), integer ns from now until
--            the pause in force ends, the number of the last reservation
--            granted (a resume recorded with a later number ended this
--            pause), and the key's state as written
-- Errors     PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG; with KEYS[3],
--            PACER_UNKNOWN (see note.lua). Nothing is written on an error.

local d = tonumber(ARGV[opi])
if not d or d ~= d or d <= 0 or d == math.huge or d ~= math.floor(d) then
  return redis.error_reply('PACER_ARG pause must be a positive whole number of µs')
end
local noted, note_stored = #KEYS >= 3, nil
if noted then
  if not ARGV[opi + 1] or ARGV[opi + 1] == '' then
    return redis.error_reply('PACER_ARG want the op to record')
  end
  local err
  err, note_stored = note_check(opi + 2)
  if err then
    return err
  end
end
local longer = d > pause
if longer then
  -- A new pause, or a longer one over a pause during which reservations
  -- were granted (they lie between its end and the longer one's, and a
  -- resume must not move them with those granted after: by as much, they
  -- would fall before the slots granted before the pause): the latest slot
  -- granted so far (buckets' last events), or now if later.
  if pause <= 0 or (mark_p and seq > mark_p.q) then
    local last = 0
    for i = 1, nbands do
      if bands[i].bucket and bands[i].e > last then
        last = bands[i].e
      end
    end
    for i = 1, #extra do
      if extra[i].bucket and extra[i].e > last then
        last = extra[i].e
      end
    end
    mark_p, mark_l = {q = seq, e = last}, nil
    -- "~w": the latest window holding units, of each window band (in
    -- force, or a record not in force: its index needs no length). The
    -- reservations granted during the pause come after them: resume.lua
    -- moves them by whole windows, into windows after these. Written when
    -- the state has a window band; one not named held no units then.
    mark_w = nil
    for i = 1, nbands + #extra do
      local b = bands[i] or extra[i - nbands]
      if not b.bucket then
        mark_w = mark_w or {q = seq, w = {}}
        if b.u > 0 then
          mark_w.w[b.name] = b.w
        end
      end
    end
  end
  pause = d
  pause_at = d
end
local grown = 0 -- how much later the records not in force are full again
for i = 1, nbands do
  local b = bands[i]
  if b.bucket and b.z < pause then
    b.z = pause
    b.rec = true
  end
end
for i = 1, #extra do
  local x = extra[i]
  if x.bucket and x.z < pause then
    if pause - x.z > grown then
      grown = pause - x.z
    end
    x.z = pause
  end
end
-- The expiry as set covered the records not in force (it never moves
-- earlier): it moves as far as they moved, set anew (not kept: the key's
-- time to live is what was set, not this).
if grown > 0 then
  need_at_least = expiry + grown
end
local state = save()
if noted then
  note_write(opi + 2, ARGV[opi + 1], note_stored)
end
if longer then
  publish('pause', state)
end
return {now_us, now_ns, ns(pause), seq, state}
