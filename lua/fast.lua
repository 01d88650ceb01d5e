-- fast.lua: reserve.lua's way for a Limit, between head.lua and core.lua
-- (lua.go): the commonest calls, requests on a Limit (ARGV[3]'s "L" form)
-- at the whole share, on either clock, writing format 3 or 2, on a key
-- whose state is absent or a Limit's with no pause and no stored limit,
-- with no floor and no lost horizon that applies (a key Redis lost). It
-- applies the rule through head.lua's helpers (grid, charge, limit_state,
-- limit_read, reply1), as core.lua's earliest, take and save do for a
-- bucket band, without building core.lua's tables and functions; anything
-- else, and every error, falls through to core.lua before anything is
-- written. TestFastPathSameAsCore holds its replies and states to
-- core.lua's.
do
  local policy, reqs = ARGV[3], ARGV[5] or ''
  -- The requests: m plain ones ("" or "<m>": cost 1, no maximum wait), or
  -- nreq bytes of (max_wait_us, cost) doubles.
  local m, nreq = 1, 0
  if reqs ~= '' then
    m = string.match(reqs, '^%d+$') and tonumber(reqs)
    if not m or m < 2 or #reqs > 4 then
      nreq = #reqs
      m = nreq / 16
    end
  end
  if share_arg == '1' and write_fmt > 1 and not cal_arg and #ARGV <= 5 and (ARGV[4] or '') == ''
      and #policy == 17 and string.byte(policy, 1) == 76 and nreq % 16 == 0 and m >= 1 and m <= 2048 then
    local rate, burst = struct.unpack('<dd', policy, 2)
    -- Well formed, or core.lua says why not. (NaN fails every comparison.)
    local ok = rate > 0 and rate < huge and burst >= 1 and burst < huge and burst == math.floor(burst)
    for pos = 1, nreq, 16 do
      local w, c = struct.unpack('<dd', reqs, pos)
      ok = ok and (w == -1 or (w >= 0 and w < huge)) and c >= 0 and c <= burst + 1e-9
    end
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
        elseif not server_time then
          -- A client's clock behind the state's writer: core.lua grants
          -- nothing before the state's t (its pause). On server time, a
          -- clock that stepped back reads the state as if no time had
          -- passed (base stays).
          ok = false
        end
        expiry, seq = x * 1000 + base, s + 0
        z, e = rz / 1000 + base, re / 1000 + base
        if not (z > -fill) then
          z = -fill
        end
        -- A lost key's horizon applies to a state numbered before it.
        if lost_h2 and lost_seq and seq < lost_seq then
          ok = false
        end
      else
        ok = false
      end
    elseif ok and (lost_h2 or redis.pcall('GET', KEYS[2])) then
      ok = false -- a lost key's horizon, or a stored limit (or another type): core.lua
    end
    if ok then
      -- core.lua's earliest and take for one bucket, request by request,
      -- from now (no pause).
      local q0 = grid(0)
      local out = m > 1 and {now_us, now_ns, m} or nil
      local bys = out and {}
      local w, s1, by, granted = 0, 0, '~', false
      for r = 1, m do
        local max_wait, c = -1, 1
        if nreq > 0 then
          max_wait, c = struct.unpack('<dd', reqs, 16 * r - 15)
        end
        local s, q = 0, q0
        by = '~'
        if c > 0 then
          local t = z + c * upp
          local gt = grid(t)
          if gt > q then
            s, q, by = t, gt, 'permits'
          end
        end
        w = math.floor((q + now_frac) * 1000 + 0.5) - now_ns -- (tools.lua's tell)
        if q > max_queue_us then
          w, s1 = 0, -1
        elseif max_wait >= 0 and w > max_wait * 1000 then
          s1 = 0
        else
          if c > 0 then
            local eb
            z, e, eb = charge(z, e, nil, fill, c * upp, q, s)
            if eb then
              -- A reservation that needs a bound ("~e") is written by
              -- core.lua: the whole call goes there.
              ok = false
              break
            end
          end
          seq = seq + 1
          granted = true
          s1 = seq
        end
        if out then
          out[2 + 2 * r], out[3 + 2 * r], bys[r] = w, s1, by
        end
      end
      local state = raw or ''
      if ok and granted then
        -- core.lua's save: the expiry moves only when it must.
        local need = z + fill + 1000000
        if need < 1000000 then
          need = 1000000
        end
        local keep = expiry >= need
        local x
        if keep then
          x = math.floor((expiry + now_frac) / 1000)
        else
          x = math.ceil((need + 1000000) / 1000)
        end
        state = limit_state(write_fmt, z, e, x, seq, 0)
        if state then
          if keep then
            redis.call('SET', KEYS[1], state, 'KEEPTTL')
          else
            redis.call('SET', KEYS[1], state, 'PX', x)
          end
        else
          ok = false
        end
      end
      if ok then
        if not out then
          return reply1(w, s1, state, '', by)
        end
        local n = #out
        out[n + 1] = #state
        out[n + 2] = state
        out[n + 3] = 0
        out[n + 4] = table.concat(bys, ' ')
        return struct.pack('<I7HI4' .. string.rep('i8i8', m) .. 'I4c0I4c0', unpack(out))
      end
    end
  end
end
