-- rewrite.lua: write a key group's state back in the format ARGV[3] asks
-- for, changing nothing it means (cmd/pacer format 1, before a rollback to
-- a release that reads only format 1: see admin.Client.SetFormat). Its
-- times are rebased to now, as every write does.
--
-- KEYS, ARGV[1..opi-1]: see core.lua (k = 0: the state's records, kept as
-- they are).
-- Reply      the state written, or false when the key has none
-- Errors     PACER_ARG, PACER_WRONGTYPE, PACER_CONFIG.

if not raw then
  return false
end
return save()
