-- fast.lua: reserve.lua's common case, run before core.lua (lua.go puts it
-- in front): one bucket band named "permits" charging the only unit (a
-- Limit), share 1, no floor, a state with no stored limit in the format
-- asked for (ARGV[3]: "1" format 2, "f1 1" format 1; or no state and no
-- stored limit), every argument well formed. It does exactly
-- what core.lua and reserve.lua do in that case, without building their
-- tables and functions; anything else falls through to them (before
-- anything is written), which also gives every error reply.
-- KEYS and ARGV: see core.lua and reserve.lua.
do
  local m = ARGV[12]
  if m == '1' then
    m = 1
  else
    m = tonumber(m)
  end
  local v1 = ARGV[3] == 'f1 1'
  if (v1 or ARGV[3] == '1') and ARGV[5] == '1' and ARGV[6] == 'permits' and ARGV[7] == '1' and ARGV[8] == 'b' and ARGV[11] == ''
      and m and m >= 1 and #ARGV == 12 + 2 * m and not string.find(ARGV[4], ' ', 1, true) then
    local rate, burst = tonumber(ARGV[9]), tonumber(ARGV[10])
    local ok = rate and rate > 0 and rate ~= math.huge and burst and burst >= 1 and burst ~= math.huge and burst == math.floor(burst)
    local raw = ok and redis.pcall('GET', KEYS[1])
    local server_time = ARGV[1] == ''
    local now_us, now_frac, now_ns = 0, 0, 0
    local upp, fill = 0, 0
    local base, expiry, seq, pause, z, e = 0, 0, 0, 0, 0, 0
    local pause_at = nil
    if raw then
      if type(raw) ~= 'string' then
        ok = false
      else
        local t, x, s, p, zs, es
        if v1 then
          t, x, s, p, zs, es = string.match(raw, '^1 (%d+) (%-?%d+) (%d+) (%-?[%d.]+) 0 permits (%S+) (%S+)$')
        else
          t, x, s, p, zs, es = string.match(raw, '^(%d%d+) (%d+) (%d+) (%-?[%d.]+) (%S+) (%S+)$')
        end
        if t then
          upp = 1000000 / rate
          fill = burst * upp
          if server_time then
            local tm = redis.call('TIME')
            now_us = tm[1] * 1000000 + tm[2]
          else
            now_us = tonumber(ARGV[1])
            now_ns = tonumber(ARGV[2])
            now_frac = now_ns / 1000
          end
          t = tonumber(t)
          base = -now_frac
          if not (server_time and t > now_us) then
            base = t - now_us - now_frac
          end
          if v1 then
            expiry = tonumber(x) / 1000 + base -- ns
          else
            expiry = tonumber(x) * 1000 + base -- ms
          end
          seq = tonumber(s)
          if p == '0' then
            pause = base
          else
            local v = tonumber(p)
            pause = v / 1000 + base
            if v >= 1000 or v < 0 then
              pause_at = pause
            end
          end
          z = (zs == '0' and 0 or tonumber(zs) / 1000) + base
          if not (z > -fill) then
            z = -fill
          end
          e = (es == '0' and 0 or tonumber(es) / 1000) + base
          if pause < 0 then
            pause = 0
          end
        else
          ok = false
        end
      end
    elseif ok then
      -- No state: the caller's policy holds unless a limit is stored.
      if redis.pcall('GET', KEYS[2]) then
        ok = false
      else
        upp = 1000000 / rate
        fill = burst * upp
        if server_time then
          local tm = redis.call('TIME')
          now_us = tm[1] * 1000000 + tm[2]
        else
          now_us = tonumber(ARGV[1])
          now_ns = tonumber(ARGV[2])
          now_frac = now_ns / 1000
        end
        base = -now_frac
        z, e = -fill, -fill
      end
    end
    -- The requests' arguments, checked before anything is decided.
    local i = 13
    while ok and i < 13 + 2 * m do
      local w, c = ARGV[i], ARGV[i + 1]
      local x = w ~= '-1' and tonumber(w)
      if w ~= '-1' and not (x and x >= 0 and x ~= math.huge) then -- (NaN fails x >= 0)
        ok = false
      elseif c ~= '1' then
        c = tonumber(c)
        ok = c and c >= 0 and c == c and c ~= math.huge and c <= burst + 1e-9
      end
      i = i + 2
    end
    if ok then
      local out = {now_us, now_ns}
      local granted = false
      -- grid and tell as in core.lua.
      local x0 = (pause + now_frac) * 1000
      local q0 = math.ceil(x0 - 1e-3 - math.abs(x0) * 4e-16) / 1000 - now_frac
      for r = 1, m do
        local w, c = ARGV[11 + 2 * r], ARGV[12 + 2 * r]
        if c == '1' then
          c = 1
        else
          c = tonumber(c)
        end
        local s, q = pause, q0
        if c > 0 then
          local t = z + c * upp
          if t > q then
            local x = (t + now_frac) * 1000
            s, q = t, math.ceil(x - 1e-3 - math.abs(x) * 4e-16) / 1000 - now_frac
          end
        end
        local wait = math.floor((q + now_frac) * 1000 + 0.5) - now_ns
        if q > 30 * 365 * 24 * 3600 * 1000000 then
          out[2 * r + 1], out[2 * r + 2] = 0, -1
        elseif w ~= '-1' and tonumber(w) >= 0 and wait > tonumber(w) * 1000 then
          out[2 * r + 1], out[2 * r + 2] = wait, 0
        else
          if c > 0 then
            if z < s - fill then
              z = s - fill
            end
            z = z + c * upp
            if q > e then
              e = q
            end
          end
          seq = seq + 1
          granted = true
          out[2 * r + 1], out[2 * r + 2] = wait, seq
        end
      end
      local state = raw or ''
      if granted then
        -- save, as in core.lua.
        local need = pause
        if z + fill > need then
          need = z + fill
        end
        need = need + 1000000
        local fz, fe, fp = '%d', '%d', '%d'
        local zn, en, pn = (z + now_frac) * 1000, (e + now_frac) * 1000, 0
        if pause > 0 then
          pn = (pause + now_frac) * 1000
        elseif pause_at then
          pn = (pause_at + now_frac) * 1000
        end
        local r = math.floor(zn + 0.5)
        if zn - r < 0.0005 and r - zn < 0.0005 then
          zn = r
        else
          fz = '%.3f'
        end
        r = math.floor(en + 0.5)
        if en - r < 0.0005 and r - en < 0.0005 then
          en = r
        else
          fe = '%.3f'
        end
        r = math.floor(pn + 0.5)
        if pn - r < 0.0005 and r - pn < 0.0005 then
          pn = r
        else
          fp = '%.3f'
        end
        local f = '%d %d %d %d %d %d'
        if v1 then
          f = '1 %d %d %d %.3f 0 permits %.3f %.3f'
        elseif fz ~= '%d' or fe ~= '%d' or fp ~= '%d' then
          f = '%d %d %d ' .. fp .. ' ' .. fz .. ' ' .. fe
        end
        if expiry >= need then
          local x
          if v1 then
            x = math.floor((expiry + now_frac) * 1000)
          else
            x = math.floor((expiry + now_frac) / 1000)
          end
          state = string.format(f, now_us, x, seq, pn, zn, en)
          redis.call('SET', KEYS[1], state, 'KEEPTTL')
        else
          local x = math.ceil((need + 1000000) / 1000)
          local xs = x
          if v1 then
            xs = x * 1000000
          end
          state = string.format(f, now_us, xs, seq, pn, zn, en)
          redis.call('SET', KEYS[1], state, 'PX', x)
        end
      end
      out[#out + 1] = state
      out[#out + 1] = ''
      return out
    end
  end
end
