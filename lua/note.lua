-- note.lua: an operator's pause or resume (admin.Client.Pause, Resume)
-- recorded in the key's history by the same script call, so that the
-- change and its entry are one step: both happen, or neither. lua.go puts it
-- between core.lua and pause.lua or resume.lua, which use it only when
-- KEYS[3] is given (a Limiter's own pause gives two keys and records
-- nothing).
--
-- KEYS[3]  the key's history (admin.lua's KEYS[4]): a list of JSON
--          objects, newest first
-- ARGV[ni...], from the index ni the operation gives:
--   ni     who, ni+1 why (free text)
--   ni+2   how many history entries to keep (integer >= 1)
--   ni+3   "1": refuse a key with neither a state (KEYS[1]) nor a stored
--          limit (KEYS[2]) (the caller found no policy reported for it
--          either: a typo, most likely), "0": no such check
-- Errors   PACER_ARG, PACER_WRONGTYPE, PACER_UNKNOWN (the check failed).
-- The entry is admin.lua's: {"at_ms", "op", "who", "reason", "before",
-- "after"}, before and after both the stored limit ("" for none).

-- note_check checks the arguments and keys of an entry before anything is
-- written. It returns an error reply, or nil and the stored limit (false
-- for none).
local function note_check(ni)
  local keep = tonumber(ARGV[ni + 2])
  local check = ARGV[ni + 3]
  if not ARGV[ni + 1] or not keep or keep < 1 or (check ~= '0' and check ~= '1') then
    return redis.error_reply('PACER_ARG want who, why, keep >= 1 and 0 or 1')
  end
  local stored = redis.pcall('GET', KEYS[2])
  if type(stored) == 'table' then
    return redis.error_reply('PACER_WRONGTYPE the stored limit key holds another type')
  end
  local htype = redis.call('TYPE', KEYS[3])
  htype = htype.ok or htype
  if htype ~= 'none' and htype ~= 'list' then
    return redis.error_reply('PACER_WRONGTYPE the history key holds another type')
  end
  if check == '1' and not stored and not redis.pcall('GET', KEYS[1]) then
    return redis.error_reply('PACER_UNKNOWN no state and no stored limit for this key')
  end
  return nil, stored
end

-- note_write records op in the history, once the operation has written
-- the state.
local function note_write(ni, op, stored)
  local t = redis.call('TIME')
  local entry = cjson.encode({
    at_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    op = op,
    who = ARGV[ni],
    reason = ARGV[ni + 1],
    before = stored or '',
    after = stored or ''
  })
  redis.call('LPUSH', KEYS[3], entry)
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[ni + 2]) - 1)
end
