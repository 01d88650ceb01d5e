-- admin.lua: an operator stores or removes a key's limit (cmd/pacer set,
-- unset) or a tenant's weight (cmd/pacer weight), recorded in the key's
-- history. It does not use core.lua. (An operator's pause and resume are
-- recorded by pause.lua and resume.lua themselves: see note.lua.)
--
-- KEYS[1]  the key's state (core.lua's KEYS[1], in any of its three
--          formats); if present, its flag "a stored limit may exist" is
--          set, so the next script reads KEYS[2]
-- KEYS[2]  the stored limit (core.lua's KEYS[2]): "<mode> <k> <bands>"
-- KEYS[3]  the shadow figures (reserve.lua's KEYS[3]): deleted, so that a
--          new limit's figures start from zero
-- KEYS[4]  the history, a list of JSON objects, newest first
-- KEYS[5]  the stored weights (fair.lua's KEYS[11]): a hash, tenant to
--          weight
-- ARGV[1]  "set", "unset" or "weight" (store ARGV[2] as tenant ARGV[6]'s
--          weight; "" removes it)
-- ARGV[2]  set: the new stored limit (checked by the caller); unset: "";
--          weight: the weight (checked by the caller) or ""
-- ARGV[3]  who, ARGV[4] why (free text)
-- ARGV[5]  how many history entries to keep (integer >= 1)
-- ARGV[6]  weight: the tenant (any string, "" included)
-- ARGV[7]  optional, set: "=" then the stored limit the key must hold
--          ("=" alone: none), else nothing changes (PACER_CHANGED): a
--          change computed from the stored limit read before (admin's
--          SetBands) is written only over that limit
-- Reply    the history entry written (JSON): {"at_ms", "op", "who",
--          "reason", "before", "after"} and for a weight "tenant"; before
--          and after are stored limits, or the tenant's stored weights, or
--          "" for none
--          (an unset on a key Redis holds nothing of: before and after
--          "", recorded all the same; see below)
-- Errors   PACER_ARG, PACER_WRONGTYPE, PACER_NOTSTORED (unset with nothing
--          stored but a state or a history: nothing changes),
--          PACER_CHANGED (see ARGV[7])

local op, value, keep = ARGV[1], ARGV[2], tonumber(ARGV[5])
if (op ~= 'set' and op ~= 'unset' and op ~= 'weight') or (op == 'set' and value == '')
    or not keep or keep < 1 or (op == 'weight' and not ARGV[6]) then
  return redis.error_reply('PACER_ARG want set VALUE, unset or weight W TENANT, who, why, keep >= 1')
end
local state = redis.pcall('GET', KEYS[1])
if type(state) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the state key holds another type')
end
local before = redis.pcall('GET', KEYS[2])
if type(before) == 'table' then
  return redis.error_reply('PACER_WRONGTYPE the stored limit key holds another type')
end
local htype = redis.call('TYPE', KEYS[4])
htype = htype.ok or htype
if htype ~= 'none' and htype ~= 'list' then
  return redis.error_reply('PACER_WRONGTYPE the history key holds another type')
end
local stype = redis.call('TYPE', KEYS[3])
stype = stype.ok or stype
if stype ~= 'none' and stype ~= 'string' then
  return redis.error_reply('PACER_WRONGTYPE the shadow key holds another type')
end
-- Format 3 (binary): a form of core.lua's KEYS[1], by its first byte and
-- length; its flag is the first byte's lowest bit.
local b0 = state and string.byte(state, 1)
local form3 = nil
if b0 and b0 >= 160 then
  local form, n = b0 - b0 % 2, #state
  if (form == 160 and n == 11) or (form == 176 and n == 28) or (form == 192 and n == 34) or (form == 208 and n >= 28) then
    form3 = b0
  end
end
if state and not form3 and not string.match(state, '^%d%d+ %d+ %d+ c?%-?[%d.]+') and not string.match(state, '^1 %d+ %-?%d+ %d+ %-?[%d.]+ %d') then
  return redis.error_reply('PACER_WRONGTYPE the state key holds something else')
end
if op == 'unset' and not before and (state or htype ~= 'none') then
  return redis.error_reply('PACER_NOTSTORED no limit is stored for this key')
end
-- An unset that finds nothing of the key at all (no state, no stored
-- limit, no history) may come just after Redis lost the key (restarted
-- empty), while Limiters pacing locally still remember its stored limit:
-- the first of them back would put it back (restore.lua does when nothing
-- of the key is left). So the unset is recorded all the same, before ""
-- and after "" (the reply: nothing was removed), and the operator's word
-- stands (combination runner, seed 86). A mistyped key keeps that one
-- history entry.
if op == 'set' and ARGV[7] and ARGV[7] ~= '' then
  if string.sub(ARGV[7], 1, 1) ~= '=' then
    return redis.error_reply('PACER_ARG want "=" and the stored limit expected')
  end
  if string.sub(ARGV[7], 2) ~= (before or '') then
    return redis.error_reply('PACER_CHANGED the stored limit is not the one expected')
  end
end
if op == 'weight' then
  local w = redis.pcall('HMGET', KEYS[5], ARGV[6])
  if w.err then
    return redis.error_reply('PACER_WRONGTYPE the stored weights key holds another type')
  end
  local was = w[1] or ''
  if value == '' then
    if was == '' then
      return redis.error_reply('PACER_NOTSTORED no weight is stored for this tenant')
    end
    redis.call('HDEL', KEYS[5], ARGV[6])
  else
    redis.call('HSET', KEYS[5], ARGV[6], value)
  end
  local t = redis.call('TIME')
  local entry = cjson.encode({
    at_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    op = op, tenant = ARGV[6], who = ARGV[3], reason = ARGV[4], before = was, after = value
  })
  redis.call('LPUSH', KEYS[4], entry)
  redis.call('LTRIM', KEYS[4], 0, keep - 1)
  return entry
end

local after = ''
if op == 'set' then
  redis.call('SET', KEYS[2], value)
  after = value
else
  redis.call('DEL', KEYS[2])
end
redis.call('DEL', KEYS[3])
if state and after ~= '' then
  -- Set the flag, so the next script reads KEYS[2]. Format 3: the first
  -- byte's lowest bit; format 2: "c" before the pause (field 4); format 1:
  -- field 6 is 1.
  local head, c, rest = string.match(state, '^(%d%d+ %d+ %d+ )(c?)(.*)$')
  if form3 then
    if form3 % 2 == 0 then
      redis.call('SET', KEYS[1], string.char(form3 + 1) .. string.sub(state, 2), 'KEEPTTL')
    end
  elseif head then
    if c == '' then
      redis.call('SET', KEYS[1], head .. 'c' .. rest, 'KEEPTTL')
    end
  else
    head, rest = string.match(state, '^(1 %d+ %-?%d+ %d+ %-?[%d.]+ )%d(.*)$')
    redis.call('SET', KEYS[1], head .. '1' .. rest, 'KEEPTTL')
  end
end
local t = redis.call('TIME')
local entry = cjson.encode({
  at_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
  op = op,
  who = ARGV[3],
  reason = ARGV[4],
  before = before or '',
  after = after
})
redis.call('LPUSH', KEYS[4], entry)
redis.call('LTRIM', KEYS[4], 0, keep - 1)
-- The fleet's Limiters read the key's stored limit again at once (see
-- core.lua's publish).
local prefix = string.match(KEYS[1], '^(.-){')
if prefix then
  redis.pcall('PUBLISH', prefix .. '{limiters}:events', 'limit ' .. KEYS[1] .. ' ' .. after)
end
return entry
