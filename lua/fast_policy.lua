-- fast_policy.lua: fast.lua's case for a policy, run after it and before
-- core.lua (lua.go puts it there): up to 9 bucket and window bands, on any
-- units, under fast.lua's conditions (share 1, no floor, no stored limit,
-- the format asked for, every argument well formed), whose state holds
-- exactly its bands' records, in its order, and nothing else. It does
-- exactly what core.lua and reserve.lua do in that case, without their
-- closures, merges and record lists, and writes the state with one
-- string.format; anything else falls through to them, before anything is
-- written. A Limit's call that fast.lua took or declined (fast_limit) is
-- not tried here. TestFastPathSameAsCore holds it to core.lua's bytes.
-- (At most 32 captures: 4 + 3 * 9.)
-- KEYS and ARGV: see core.lua and reserve.lua.
if not fast_limit then
  local argv = ARGV
  local share = argv[3]
  local v1 = share == 'f1 1'
  local k = argv[5]
  if k == '1' then
    k = 1
  else
    k = tonumber(k)
  end
  local floor, ceil, huge = math.floor, math.ceil, math.huge
  local units = argv[4]
  local opi = k and 6 + 5 * k
  local m = opi and argv[opi + 1]
  if m == '1' then
    m = 1
  elseif m then
    m = tonumber(m)
  end
  -- The units: names with single spaces between them (core.lua counts the
  -- spaces for the costs and the names for the bands' units).
  local nunits = nil
  if units == 'permits' or string.find(units, '^%S+$') then
    nunits = 1
  elseif string.find(units, '^%S+ %S+$') then
    nunits = 2
  elseif units ~= '' and not string.find(units, '^ ') and not string.find(units, ' $') and not string.find(units, '  ', 1, true)
      and not string.find(units, '[\t\n\v\f\r]') then
    local _, n = string.gsub(units, ' ', ' ')
    nunits = n + 1
  end
  -- (x % 1 ~= 0: x is not a whole number, NaN included, without a call.)
  if (v1 or share == '1') and k and k >= 1 and k <= 9 and k % 1 == 0 and nunits and m and m >= 1 and m % 1 == 0
      and argv[opi] == '' and #argv == opi + 1 + m * (1 + nunits) then
    local now_us, now_frac, now_ns = 0, 0, 0
    if argv[1] == '' then
      local tm = redis.call('TIME')
      now_us = tm[1] * 1000000 + tm[2]
    else
      now_us = tonumber(argv[1])
      now_ns = tonumber(argv[2])
      now_frac = now_ns / 1000
    end
    -- The bands, as core.lua's read_bands reads them at the whole share,
    -- each a list: a bucket {name, unit, true, upp, burst, fill, z, e}, a
    -- window {name, unit, false, n, n, len, rem, cur, w, u}.
    local bands, ok = {}, now_us and now_ns and true
    local i = 6
    for n = 1, k do
      if not ok then
        break
      end
      local name, unit, kind, a, b = argv[i], argv[i + 1], argv[i + 2], tonumber(argv[i + 3]), argv[i + 4]
      if unit == '1' then
        unit = 1
      else
        unit = tonumber(unit)
      end
      if not unit or unit < 1 or unit > nunits or unit % 1 ~= 0 or string.byte(name, 1) == 126 or not a or a ~= a or a == huge then
        ok = false
      elseif kind == 'b' then
        b = tonumber(b)
        if a <= 0 or not b or b ~= b or b < 1 or b == huge or b % 1 ~= 0 then
          ok = false
        else
          local upp = 1000000 / (a * 1)
          bands[n] = {name, unit, true, upp, b, b * upp, -b * upp, -b * upp}
        end
      elseif kind == 'w' then
        local len, origin = string.match(b, '^(%d+):(%d+)$')
        len, origin = tonumber(len), tonumber(origin)
        if a < 1 or not len or len < 1 then
          ok = false
        else
          local q = now_us - origin
          local cur = floor(q / len)
          local rem = q - cur * len
          if rem < 0 then
            cur, rem = cur - 1, rem + len
          elseif rem >= len then
            cur, rem = cur + 1, rem - len
          end
          bands[n] = {name, unit, false, a, a, len, rem + now_frac, cur, cur, 0}
        end
      else
        ok = false
      end
      for j = 1, n - 1 do
        if ok and bands[j][1] == name then
          ok = false -- one name twice: core.lua's matching of records
        end
      end
      i = i + 5
    end
    -- The requests' arguments, checked (and each cost fitting every band)
    -- before anything is decided: anything else is core.lua's error.
    local costs, waits = {}, {}
    i = opi + 2
    for r = 1, m do
      if not ok then
        break
      end
      local w = argv[i]
      if w == '-1' then
        w = -1
      else
        w = tonumber(w)
      end
      if not w or w ~= w or w == huge or (w < 0 and w ~= -1) then
        ok = false
      end
      local cost = {}
      for u = 1, nunits do
        local c = argv[i + u]
        if c == '1' then
          cost[u] = 1
        else
          c = tonumber(c)
          if not c or c < 0 or c ~= c or c == huge then
            ok = false
          end
          cost[u] = c
        end
      end
      for j = 1, k do
        local b = bands[j]
        if ok and (cost[b[2]] or 0) > b[5] + 1e-9 then
          ok = false
        end
      end
      waits[r], costs[r] = w, cost
      i = i + 1 + nunits
    end
    local raw = ok and redis.pcall('GET', KEYS[1])
    local base, expiry, seq, pause = -now_frac, 0, 0, 0
    local pause_at = nil
    if raw then
      if type(raw) ~= 'string' then
        ok = false
      else
        -- The header and exactly the bands' records, in their order, in
        -- one match.
        local pat
        if k == 3 then
          pat = ' (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$'
        elseif k == 2 then
          pat = ' (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$'
        else
          pat = string.rep(' (%S+) (%S+) (%S+)', k) .. '$'
        end
        if v1 then
          pat = '^1 (%d+) (%-?%d+) (%d+) (%-?%d+%.?%d*) 0' .. pat
        else
          pat = '^(%d%d+) (%d+) (%d+) (%-?%d+%.?%d*)' .. pat
        end
        local f = {string.match(raw, pat)}
        local t, x, s, p = f[1], f[2], f[3], f[4]
        if t then
          t = t + 0
          if not (argv[1] == '' and t > now_us) then
            base = t - now_us - now_frac
          end
          if v1 then
            expiry = (x + 0) / 1000 + base
          else
            expiry = (x + 0) * 1000 + base
          end
          seq = s + 0
          if p == '0' or p == '0.000' then
            pause = base
          else
            local v = p + 0
            pause = v / 1000 + base
            if v >= 1000 or v < 0 then
              pause_at = pause
            end
          end
          for j = 1, k do
            local b = bands[j]
            local xs, ys = f[3 * j + 3], f[3 * j + 4]
            if f[3 * j + 2] ~= b[1] then
              ok = false
              break
            end
            if b[3] then
              local zz, ee = tonumber(xs), tonumber(ys)
              if not zz or not ee or (v1 and not string.find(xs, '.', 1, true)) or (not v1 and string.byte(xs, 1) == 119) then
                ok = false
                break
              end
              zz = zz / 1000 + base
              if zz > -b[6] then
                b[7] = zz
              end
              b[8] = ee / 1000 + base
            else
              if not v1 then
                if string.byte(xs, 1) ~= 119 then -- 'w'
                  ok = false
                  break
                end
                xs = string.sub(xs, 2)
              elseif string.find(xs, '.', 1, true) then
                ok = false
                break
              end
              local w, u = tonumber(xs), tonumber(ys)
              if not w or not u then
                ok = false
                break
              end
              if w >= b[8] then
                if (w + 1 - b[8]) * b[6] - b[7] <= expiry + 1000000 then
                  b[9], b[10] = w, u
                elseif u > 0 then
                  b[10] = b[4]
                end
              end
            end
          end
        else
          ok = false
        end
      end
    elseif ok then
      -- No state: the caller's policy holds unless a limit is stored.
      if redis.pcall('GET', KEYS[2]) then
        ok = false
      end
    end
    if ok and not v1 and k == 1 and bands[1][3] and bands[1][1] == 'permits' then
      ok = false -- format 2 writes a Limit's record without its name: core.lua
    end
    if ok then
      if pause < 0 then
        pause = 0
      end
      -- earliest, tell and take as in core.lua, at the whole share (grid
      -- written out).
      local out = {now_us, now_ns}
      local bys = {} -- the binding bands (earliest's in core.lua)
      local granted = false
      for r = 1, m do
        local cost, max_wait = costs[r], waits[r]
        local s, idx, never = pause, nil, false
        local by = pause > 0 and '~p' or '~'
        local q = (s + now_frac) * 1000
        q = ceil(q - 1e-3 - (q < 0 and -q or q) * 4e-16) / 1000 - now_frac
        for _ = 1, 8 do
          local moved = false
          for j = 1, k do
            local b = bands[j]
            local c = cost[b[2]] or 0
            if c > 0 then
              if b[3] then
                local t = b[7] + c * b[4]
                local gt = (t + now_frac) * 1000
                gt = ceil(gt - 1e-3 - (gt < 0 and -gt or gt) * 4e-16) / 1000 - now_frac
                if gt > q then
                  s, q, moved = t, gt, true
                  by = (pause > 0 and b[7] <= pause) and '~p' or b[1]
                end
              else
                local w = b[8] + floor((b[7] + q) / b[6])
                if w < b[9] then
                  w = b[9]
                end
                local tries = 0
                while (w == b[9] and b[10] or 0) + c > b[4] * (1 + 1e-9) do
                  w = w + 1
                  tries = tries + 1
                  if tries > 1 then
                    never = true
                    break
                  end
                end
                if never then
                  break
                end
                local ws = (w - b[8]) * b[6] - b[7]
                local gws = (ws + now_frac) * 1000
                gws = ceil(gws - 1e-3 - (gws < 0 and -gws or gws) * 4e-16) / 1000 - now_frac
                if gws > q then
                  s, q, moved = ws, gws, true
                  by = b[1]
                end
                idx = idx or {}
                idx[j] = w
              end
            end
          end
          if never or not moved then
            break
          end
        end
        bys[r] = never and '~' or by
        local wait = not never and floor((q + now_frac) * 1000 + 0.5) - now_ns
        if never then
          out[2 * r + 1], out[2 * r + 2] = 0, -2
        elseif q > 30 * 365 * 24 * 3600 * 1000000 then
          out[2 * r + 1], out[2 * r + 2] = 0, -1
        elseif max_wait >= 0 and wait > max_wait * 1000 then
          out[2 * r + 1], out[2 * r + 2] = wait, 0
        else
          for j = 1, k do
            local b = bands[j]
            local c = cost[b[2]] or 0
            if c > 0 then
              if b[3] then
                local f = b[6]
                if f < c * b[4] then
                  f = c * b[4]
                end
                local z = b[7]
                if z < s - f then
                  z = s - f
                end
                b[7] = z + c * b[4]
                if q > b[8] then
                  b[8] = q
                end
              else
                if idx[j] > b[9] then
                  b[9], b[10] = idx[j], 0
                end
                b[10] = b[10] + c
              end
            end
          end
          seq = seq + 1
          granted = true
          out[2 * r + 1], out[2 * r + 2] = wait, seq
        end
      end
      local state = raw or ''
      if granted then
        -- save, as in core.lua: one format of every field.
        local need = pause
        local f, vals = {}, {}
        for j = 1, k do
          local b = bands[j]
          local nf = 3 * j
          if b[3] then
            if b[7] + b[6] > need then
              need = b[7] + b[6]
            end
            local zn, en = (b[7] + now_frac) * 1000, (b[8] + now_frac) * 1000
            local fz, fe = ' %.3f', ' %.3f'
            if not v1 then
              local rz, re = floor(zn + 0.5), floor(en + 0.5)
              if zn - rz < 0.0005 and rz - zn < 0.0005 then
                fz, zn = ' %d', rz
              end
              if en - re < 0.0005 and re - en < 0.0005 then
                fe, en = ' %d', re
              end
            end
            f[j] = ' %s' .. fz .. fe
            vals[nf - 2], vals[nf - 1], vals[nf] = b[1], zn, en
          else
            local over = (b[9] + 1 - b[8]) * b[6] - b[7]
            if b[10] > 0 and over > need then
              need = over
            end
            f[j] = v1 and ' %s %d %.17g' or ' %s w%d %.17g'
            vals[nf - 2], vals[nf - 1], vals[nf] = b[1], b[9], b[10]
          end
        end
        need = need + 1000000
        local fp, p = '%d', 0
        if pause > 0 then
          p = (pause + now_frac) * 1000
        elseif pause_at then
          p = (pause_at + now_frac) * 1000
        end
        if v1 then
          if p ~= 0 or pause > 0 or pause_at then
            fp = '%.3f'
          end
          fp = '1 %d %d %d ' .. (fp == '%d' and '%d.000' or fp) .. ' 0'
        else
          local r = floor(p + 0.5)
          if p - r < 0.0005 and r - p < 0.0005 then
            p = r
          else
            fp = '%.3f'
          end
          fp = '%d %d %d ' .. fp
        end
        local keep = expiry >= need
        local x, px
        if keep then
          if v1 then
            x = floor((expiry + now_frac) * 1000)
          else
            x = floor((expiry + now_frac) / 1000)
          end
        else
          expiry = need + 1000000
          px = ceil(expiry / 1000)
          x = v1 and px * 1000000 or px
        end
        if k <= 3 then
          state = string.format(fp .. f[1] .. (f[2] or '') .. (f[3] or ''), now_us, x, seq, p,
            vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8], vals[9])
        else
          state = string.format(fp .. table.concat(f), now_us, x, seq, p, unpack(vals, 1, 3 * k))
        end
        if keep then
          redis.call('SET', KEYS[1], state, 'KEEPTTL')
        else
          redis.call('SET', KEYS[1], state, 'PX', px)
        end
      end
      out[2 * m + 3], out[2 * m + 4], out[2 * m + 5] = state, '', table.concat(bys, ' ')
      return out
    end
  end
end
