-- fast.lua: reserve.lua's way for a Limit, between head.lua and core.lua
-- (lua.go): the commonest call, one request on a Limit (ARGV[3]'s "L"
-- form) at the whole share, on server time, writing format 3 or 2, on a
-- key whose state is absent or a Limit's with no pause and no stored
-- limit, with no floor and no lost horizon. It applies the rule through
-- head.lua's helpers (grid, charge, limit_state, limit_read, reply1), as
-- core.lua's earliest, take and save do for a bucket band, without
-- building core.lua's tables and functions; anything else, and every
-- error, falls through to core.lua before anything is written.
-- TestFastPathSameAsCore holds its replies and states to core.lua's.
do
  local policy, reqs = ARGV[3], ARGV[5] or ''
  if share_arg == '1' and server_time and write_fmt > 1 and not lost_h2 and not cal_arg and #ARGV <= 5 and (ARGV[4] or '') == ''
      and #policy == 17 and string.byte(policy, 1) == 76 and (reqs == '' or #reqs == 16) then
    local rate, burst = struct.unpack('<dd', policy, 2)
    local max_wait, c = -1, 1
    if reqs ~= '' then
      max_wait, c = struct.unpack('<dd', reqs)
    end
    -- Well formed, or core.lua says why not. (NaN fails every comparison.)
    local ok = rate > 0 and rate < huge and burst >= 1 and burst < huge and burst == math.floor(burst)
        and (max_wait == -1 or (max_wait >= 0 and max_wait < huge)) and c >= 0 and c <= burst + 1e-9
    local raw = ok and redis.pcall('GET', KEYS[1])
    local base, expiry, seq = -now_frac, 0, 0
    local upp = 1000000 / rate
    local fill = burst * upp
    local z, e = -fill, -fill
    if raw then
      local t, x, s, rz, re, cfg
      local b0 = type(raw) == 'string' and string.byte(raw, 1)
      if not b0 then
        ok = false
      elseif b0 >= 160 then
        t, x, s, rz, re, cfg = limit_read(raw)
        if cfg ~= 0 then
          t = nil
        end
      else
        -- Format 2's Limit, with no pause and no flag.
        t, x, s, rz, re = string.match(raw, '^(%d%d+) (%d+) (%d+) 0 (%-?%d+%.?%d*) (%-?%d+%.?%d*)$')
      end
      if t then
        t = t + 0
        if t <= now_us then
          base = t - now_us - now_frac
        end
        expiry, seq = x * 1000 + base, s + 0
        z, e = rz / 1000 + base, re / 1000 + base
        if not (z > -fill) then
          z = -fill
        end
      else
        ok = false
      end
    elseif ok and redis.pcall('GET', KEYS[2]) then
      ok = false -- a stored limit (or another type): core.lua
    end
    if ok then
      -- core.lua's earliest for one bucket, from now (no pause).
      local s, q, by = 0, grid(0), '~'
      if c > 0 then
        local t = z + c * upp
        local gt = grid(t)
        if gt > q then
          s, q, by = t, gt, 'permits'
        end
      end
      local w = math.floor((q + now_frac) * 1000 + 0.5) - now_ns -- (tools.lua's tell)
      if q > max_queue_us then
        return reply1(0, -1, raw or '', '', by)
      elseif max_wait >= 0 and w > max_wait * 1000 then
        return reply1(w, 0, raw or '', '', by)
      end
      local eb = nil
      if c > 0 then
        z, e, eb = charge(z, e, nil, fill, c * upp, q, s)
      end
      -- A reservation that needs a bound ("~e") is written by core.lua.
      if not eb then
        seq = seq + 1
        -- core.lua's save: the expiry moves only when it must.
        local need = z + fill + 1000000
        local x
        if need < 1000000 then
          need = 1000000
        end
        local keep = expiry >= need
        if keep then
          x = math.floor((expiry + now_frac) / 1000)
        else
          x = math.ceil((need + 1000000) / 1000)
        end
        local state = limit_state(write_fmt, z, e, x, seq, 0)
        if state then
          if keep then
            redis.call('SET', KEYS[1], state, 'KEEPTTL')
          else
            redis.call('SET', KEYS[1], state, 'PX', x)
          end
          return reply1(w, seq, state, '', by)
        end
      end
    end
  end
end
