-- resume.lua: end the key group's pause now (cmd/pacer resume), and free
-- the key at once: the reservations granted while the pause was in force
-- (queued after it, or moved there by their sleepers) are moved earlier, as
-- if the pause had ended now, by the same d for all of them, and the
-- buckets' schedules with them; a sleeper or a hold learns d from the state
-- ("~s q:r d", see core.lua) and uses its slot d earlier. d is the time
-- left in the pause, less any part of it still covered by slots granted
-- before the pause; a window band's queue stays in the window the pause
-- ends in, or moves by whole windows, into windows after the one holding
-- the latest slot granted before the pause ("~w", pause.lua; without it,
-- d keeps every slot in its window); a window's record not in force (its
-- length unknown: an operator passes the fleet's policy) holding units
-- makes d 0; when they lie on a lattice (members held: core.lua's "~l"),
-- d is a whole number of its periods, so that they stay on their ranks'
-- instants. Without a
-- record of the pause ("~p": a pause made by an earlier version, or by a
-- process pacing locally), the buckets are empty now, or at the last slot
-- granted if that is later.
--
-- KEYS, ARGV[1..opi-1]: see core.lua (k may be 0: the state's records).
-- KEYS[3]    optional: the key's history (an operator's resume,
--            admin.Client.Resume): the resume is recorded there, by this
--            call (note.lua), and a key with no pause in force is refused
--            (PACER_NOTPAUSED)
-- ARGV[opi...] with KEYS[3]: who, why, keep, check (see note.lua)
-- Reply      now_us, now_ns (see reserve.lua), integer ns from now until
--            the pause that was in force would have ended (0: none), and d
--            in integer ns (0: nothing moved)
-- Errors     PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG; with KEYS[3],
--            PACER_UNKNOWN (see note.lua) and PACER_NOTPAUSED. Nothing is
--            written on an error.

local was = pause
local noted, note_stored = #KEYS >= 3, nil
if noted then
  local err
  err, note_stored = note_check(opi)
  if err then
    return err
  end
  if was <= 0 then
    return redis.error_reply('PACER_NOTPAUSED no pause is in force')
  end
end
local shift = 0
-- moves: the window bands (by index) holding reservations granted during
-- the pause, whose record moves by the whole windows they move.
local moves = {}
if was > 0 and mark_p then
  shift = was - math.max(0, mark_p.e)
  -- The latest window holding units before the pause, by band ("~w",
  -- pause.lua: a band not named held none), or nil (a pause of an
  -- earlier release).
  local before = mark_w and mark_w.q == mark_p.q and mark_w.w or nil
  local period = mark_l and mark_l.u * mark_l.n or nil
  -- A window band not in force (a resume with no band, or a band the
  -- policy passed does not name): its length is not known here, so
  -- neither is where its windows lie. Holding units, it may hold the
  -- pause's queue: nothing moves.
  for i = 1, #extra do
    if not extra[i].bucket and extra[i].u > 0 then
      shift = 0
    end
  end
  -- Each band bounds shift to what keeps its reservations in windows it
  -- may hold them in; a lattice, to a whole number of its periods. Each
  -- bound only lowers shift: repeated until none does (or, on bounds that
  -- never meet, until nothing moves).
  local rounds = 0
  local changed = shift > 0
  while changed do
    changed = false
    rounds = rounds + 1
    if rounds > 64 then
      shift = 0
      break
    end
    for i = 1, nbands do
      local b = bands[i]
      if not b.bucket and shift > 0 then
        local wp = win_of(b, was) -- the pause end's window
        local to = shift
        if b.w >= wp then
          -- The band holds reservations from the pause end's window on:
          -- those granted during the pause. Within that window they may
          -- move to its start (none lies before was); by whole windows
          -- (not a calendar's), into none holding slots granted before.
          local k = 0
          if before and not b.cal then
            k = math.floor(shift / b.len)
            if before[b.name] then
              k = math.min(k, wp - before[b.name] - 1)
            end
            if k < 0 then
              k = 0
            end
          end
          to = k * b.len
          if b.w == wp then
            to = to + math.min(was - win_start(b, wp, true), shift - to)
          end
          moves[i] = true
        end
        if to < shift then
          shift, changed = to, true
        end
      end
    end
    if period and shift > 0 then
      -- Slots granted on a lattice move by whole periods, onto the
      -- instants of the same ranks; on lattices of several, not at all.
      local d = ns(shift)
      if period > 0 then
        d = d - d % period
      else
        d = 0
      end
      if d / 1000 < shift then
        shift, changed = d / 1000, true
      end
    end
  end
  if shift < 0 then
    shift = 0
  end
end
local d_ns = ns(shift)
shift = d_ns / 1000 -- a whole ns: sleepers move by exactly what they read
local function free(b)
  if shift > 0 then
    b.z = b.z - shift
    if b.e >= was - same_us then
      b.e = b.e - shift
    end
    if b.eb and b.eb >= was - same_us then
      b.eb = b.eb - shift
    end
  elseif not mark_p or was <= 0 then
    local empty = math.max(0, b.e)
    if b.z > empty then
      b.z = empty
    end
  end
end
for i = 1, nbands do
  if bands[i].bucket then
    free(bands[i])
  end
end
for i = 1, #extra do
  if extra[i].bucket then
    free(extra[i])
  end
end
-- A window band's units move with its queue: by the whole windows it moved.
for i in pairs(moves) do
  local b = bands[i]
  if shift > 0 and not b.cal then
    b.w = b.w - math.floor(shift / b.len)
  end
end
-- The resume's record, also when nothing moved (d 0): a Limiter that made
-- the pause learns from it that the pause was ended, not lost.
mark_s = {string.format('%d:%d', mark_p and mark_p.q or seq, seq), string.format('%d', d_ns)}
pause, pause_at, mark_p, mark_l, mark_w = 0, nil, nil, nil, nil
local state = save()
if noted then
  note_write(opi, 'resume', note_stored)
end
publish('resume', state)
return {now_us, now_ns, ns(was), d_ns}
