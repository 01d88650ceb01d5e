-- fast.lua: reserve.lua's common case, run before core.lua (lua.go puts it
-- in front): one bucket band named "permits" charging the only unit (a
-- Limit), share 1, no floor, a state with no stored limit in the format
-- asked for (ARGV[3]: "1" format 2, "f1 1" format 1, either after a
-- deadline not yet passed; or no state and no
-- stored limit), every argument well formed. It does exactly
-- what core.lua and reserve.lua do in that case, without building their
-- tables and functions; anything else falls through to them (before
-- anything is written), which also gives every error reply. One byte
-- differs, as it always has: in format 1, a time within half a thousandth
-- of a ns below zero is written "0.000" here and "-0.000" by core.lua (both
-- read as 0). TestFastPathSameAsCore holds the rest to core.lua's bytes.
-- KEYS and ARGV: see core.lua and reserve.lua.
do
  local argv = ARGV
  local m = argv[12]
  if m == '1' then
    m = 1
  else
    m = tonumber(m)
  end
  -- A deadline ("d<ms> " in front of ARGV[3], core.lua) is checked with
  -- the time: past it, core.lua refuses the call.
  local a3, deadline = argv[3], nil
  if string.byte(a3, 1) == 100 then -- 'd'
    deadline, a3 = string.match(a3, '^d(%d+) (.+)$')
    a3 = a3 or ''
  end
  local v1 = a3 == 'f1 1'
  -- A floor of a lost key's horizon alone ("!<h2>[:<seq>]") is no floor
  -- for a key whose state is numbered seq or later (reserve.lua); for
  -- another, core.lua applies it.
  local lost = argv[11] ~= '' and string.match(argv[11], '^!%d+:?(%d*)$')
  if (v1 or a3 == '1') and argv[5] == '1' and argv[6] == 'permits' and argv[7] == '1' and argv[8] == 'b' and (argv[11] == '' or lost)
      and m and m >= 1 and #argv == 12 + 2 * m and (argv[4] == 'permits' or not string.find(argv[4], ' ', 1, true)) then
    local floor, ceil, huge = math.floor, math.ceil, math.huge
    local rate, burst = tonumber(argv[9]), tonumber(argv[10])
    local ok = rate and rate > 0 and rate ~= huge and burst and burst >= 1 and burst ~= huge and burst == floor(burst)
    local raw = ok and redis.pcall('GET', KEYS[1])
    local server_time = argv[1] == ''
    local now_us, now_frac, now_ns = 0, 0, 0
    local upp, fill = 0, 0
    local base, expiry, seq, pause, z, e = 0, 0, 0, 0, 0, 0
    local pause_at = nil
    if raw then
      if type(raw) ~= 'string' then
        ok = false
      else
        -- Every number the patterns take is one Lua reads (x + 0, cheaper
        -- than tonumber); a state they do not take goes to core.lua.
        local t, x, s, p, zs, es
        if v1 then
          -- (A bucket's times have decimals in format 1: without, the
          -- record is a window's of the same name, which core.lua drops.)
          t, x, s, p, zs, es = string.match(raw, '^1 (%d+) (%-?%d+) (%d+) (%-?%d+%.?%d*) 0 permits (%-?%d+%.%d+) (%-?%d+%.?%d*)$')
        else
          t, x, s, p, zs, es = string.match(raw, '^(%d%d+) (%d+) (%d+) (%-?%d+%.?%d*) (%-?%d+%.?%d*) (%-?%d+%.?%d*)$')
        end
        if t then
          upp = 1000000 / rate
          fill = burst * upp
          if server_time then
            local tm = redis.call('TIME')
            now_us = tm[1] * 1000000 + tm[2]
          else
            now_us = tonumber(argv[1])
            now_ns = tonumber(argv[2])
            now_frac = now_ns / 1000
          end
          if deadline and server_time and now_us > deadline * 1000 then
            ok = false -- a stale call: core.lua refuses it
          end
          t = t + 0
          base = -now_frac
          if not (server_time and t > now_us) then
            base = t - now_us - now_frac
          end
          if v1 then
            expiry = (x + 0) / 1000 + base -- ns
          else
            expiry = (x + 0) * 1000 + base -- ms
          end
          seq = s + 0
          if lost and lost ~= '' and seq < lost + 0 then
            ok = false -- a state rebuilt since: core.lua applies the horizon
          end
          if p == '0' or p == '0.000' then
            pause = base
          else
            local v = p + 0
            pause = v / 1000 + base
            if v >= 1000 or v < 0 then
              pause_at = pause
            end
          end
          z = (zs == '0' and 0 or (zs + 0) / 1000) + base
          if not (z > -fill) then
            z = -fill
          end
          e = (es == '0' and 0 or (es + 0) / 1000) + base
          if pause < 0 then
            pause = 0
          end
        else
          ok = false
        end
      end
    elseif ok then
      -- No state: the caller's policy holds unless a limit is stored, or
      -- Redis lost the key (a lost key's horizon: core.lua).
      if lost or redis.pcall('GET', KEYS[2]) then
        ok = false
      else
        upp = 1000000 / rate
        fill = burst * upp
        if server_time then
          local tm = redis.call('TIME')
          now_us = tm[1] * 1000000 + tm[2]
        else
          now_us = tonumber(argv[1])
          now_ns = tonumber(argv[2])
          now_frac = now_ns / 1000
        end
        if deadline and server_time and now_us > deadline * 1000 then
          ok = false -- a stale call: core.lua refuses it
        end
        base = -now_frac
        z, e = -fill, -fill
      end
    end
    -- The requests' arguments, checked before anything is decided.
    local i = 13
    while ok and i < 13 + 2 * m do
      local w, c = argv[i], argv[i + 1]
      if w ~= '-1' then
        local x = tonumber(w)
        if not (x and x >= 0 and x ~= huge) then -- (NaN fails x >= 0)
          ok = false
        end
      end
      if ok and c ~= '1' then
        c = tonumber(c)
        ok = c and c >= 0 and c == c and c ~= huge and c <= burst + 1e-9
      end
      i = i + 2
    end
    if ok then
      local out = nil
      if m > 1 then
        out = {now_us, now_ns}
      end
      local w1, s1 = 0, 0 -- the reply of a single request
      local by1 = '~' -- its binding band (earliest in core.lua)
      local bys = out and {}
      local granted, fell = false, false
      -- grid and tell as in core.lua.
      local x0 = (pause + now_frac) * 1000
      local q0 = ceil(x0 - 1e-3 - (x0 < 0 and -x0 or x0) * 4e-16) / 1000 - now_frac
      for r = 1, m do
        local w, c = argv[11 + 2 * r], argv[12 + 2 * r]
        if c == '1' then
          c = 1
        else
          c = tonumber(c)
        end
        local s, q = pause, q0
        by1 = pause > 0 and '~p' or '~'
        if c > 0 then
          local t = z + c * upp
          if t > q then
            local x = (t + now_frac) * 1000
            local gt = ceil(x - 1e-3 - (x < 0 and -x or x) * 4e-16) / 1000 - now_frac
            if gt > q then
              by1 = (pause > 0 and z <= pause) and '~p' or 'permits'
            end
            s, q = t, gt
          end
        end
        if bys then
          bys[r] = by1
        end
        local wait = floor((q + now_frac) * 1000 + 0.5) - now_ns
        if q > 30 * 365 * 24 * 3600 * 1000000 then
          w1, s1 = 0, -1
        elseif w ~= '-1' and tonumber(w) >= 0 and wait > tonumber(w) * 1000 then
          w1, s1 = wait, 0
        else
          if c > 0 then
            if z < s - fill then
              z = s - fill
            end
            z = z + c * upp
            local was = e
            if q > e then
              e = q
            end
            -- A reservation that needs a bound ("~e", core.lua's take): core.lua
            -- writes it, so the whole call goes there.
            if q >= was - 0.0015 and e - c * upp < was - 0.0015 and was > 0.0005 then
              fell = true
              break
            end
          end
          seq = seq + 1
          granted = true
          w1, s1 = wait, seq
        end
        if out then
          out[2 * r + 1], out[2 * r + 2] = w1, s1
        end
      end
      if not fell then
        local state = raw or ''
        if granted then
          -- save, as in core.lua.
          local need = pause
          if z + fill > need then
            need = z + fill
          end
          need = need + 1000000
          local zn, en, pn = (z + now_frac) * 1000, (e + now_frac) * 1000, 0
          if pause > 0 then
            pn = (pause + now_frac) * 1000
          elseif pause_at then
            pn = (pause_at + now_frac) * 1000
          end
          -- A time within half a thousandth of a whole ns is that ns.
          local whole = true
          local r = floor(zn + 0.5)
          if zn - r < 0.0005 and r - zn < 0.0005 then
            zn = r
          else
            whole = false
          end
          local fz = whole
          r = floor(en + 0.5)
          if en - r < 0.0005 and r - en < 0.0005 then
            en = r
          else
            whole = false
          end
          local fe = en == r
          r = floor(pn + 0.5)
          if pn - r < 0.0005 and r - pn < 0.0005 then
            pn = r
          else
            whole = false
          end
          local f = '%d %d %d %d %d %d'
          if v1 then
            -- Format 1 prints them with three decimals: a whole ns (not -0,
            -- which floor(x + 0.5) never gives) is its integer and ".000".
            if whole and zn < 1e15 and zn > -1e15 and en < 1e15 and en > -1e15 and pn < 1e15 and pn > -1e15 then
              f = '1 %d %d %d %d.000 0 permits %d.000 %d.000'
            else
              f = '1 %d %d %d %.3f 0 permits %.3f %.3f'
            end
          elseif not whole then
            f = '%d %d %d ' .. (pn == r and '%d' or '%.3f') .. ' ' .. (fz and '%d' or '%.3f') .. ' ' .. (fe and '%d' or '%.3f')
          end
          if expiry >= need then
            local x
            if v1 then
              x = floor((expiry + now_frac) * 1000)
            else
              x = floor((expiry + now_frac) / 1000)
            end
            state = string.format(f, now_us, x, seq, pn, zn, en)
            redis.call('SET', KEYS[1], state, 'KEEPTTL')
          else
            local x = ceil((need + 1000000) / 1000)
            local xs = x
            if v1 then
              xs = x * 1000000
            end
            state = string.format(f, now_us, xs, seq, pn, zn, en)
            redis.call('SET', KEYS[1], state, 'PX', x)
          end
        end
        if out then
          out[2 * m + 3], out[2 * m + 4], out[2 * m + 5] = state, '', table.concat(bys, ' ')
          return out
        end
        return {now_us, now_ns, w1, s1, state, '', by1}
      end
    end
  end
end
