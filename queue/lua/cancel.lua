-- cancel.lua: admin removes a live task (due, leased or dead) for good. A worker still holding
-- its lease gets StaleToken on its next call. The history is kept for result_ttl_ms so the
-- cancellation stays visible.
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] partial   KEYS[4] ready list
-- KEYS[5] background ready list   KEYS[6] due zset   KEYS[7] lease zset   KEYS[8] retry zset
-- KEYS[9] dead zset   KEYS[10] events stream   KEYS[11] fair zset   KEYS[12] leases held per
-- tenant (prelude/fair.lua)
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] who   ARGV[9] result_ttl_ms
-- Returns 1 if a task was cancelled, 0 if there was none.
local tkey = KEYS[1]
local hkey = KEYS[2]
local pkey = KEYS[3]
local readyk = KEYS[4]
local bgk = KEYS[5]
local duez = KEYS[6]
local leasez = KEYS[7]
local retryz = KEYS[8]
local deadz = KEYS[9]
local ekey = KEYS[10]
local fairz = KEYS[11]
local fairc = KEYS[12]
local id = ARGV[7]
local who = ARGV[8]
local ttl = tonumber(ARGV[9])
if id == nil or id == '' or who == nil or ttl == nil or ttl < 1 or #KEYS ~= 12 then
  return redis.error_reply('ERR repoll cancel: bad arguments')
end
local f = redis.call('HMGET', tkey, 's', 'pr', 'w', 'tk', 'u', 'tn')
local state = f[1]
if not state then
  return 0
end
local now = now_ms()
if state == 'due' then
  unqueue(readyk, bgk, duez, retryz, id, f[2], fairz, f[6])
elseif state == 'leased' then
  redis.call('ZREM', leasez, id)
  fair_release(fairc, f[6])
  hist_claim(hkey, num(f[5], now), 'by ' .. (f[3] or '?') .. ' token ' .. (f[4] or '?'))
else
  redis.call('ZREM', deadz, id)
end
redis.call('DEL', tkey, pkey)
hist(hkey, now, 'cancelled', 'by admin ' .. who .. ' (was ' .. state .. ')')
redis.call('PEXPIRE', hkey, ttl)
event(ekey, now, 'cancelled', id, 'by admin ' .. who)
notify_dash('cancelled', id, now)
return 1
