-- cancel.lua: admin removes a live task (due, leased or dead) for good. A worker still holding
-- its lease gets StaleToken on its next call. The history is kept for result_ttl_ms so the
-- cancellation stays visible.
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] due zset   KEYS[4] lease zset   KEYS[5] retry zset
-- KEYS[6] dead zset   KEYS[7] events stream
-- ARGV[1..5] common   ARGV[6] id   ARGV[7] who   ARGV[8] result_ttl_ms
-- Returns 1 if a task was cancelled, 0 if there was none.
local tkey = KEYS[1]
local hkey = KEYS[2]
local duez = KEYS[3]
local leasez = KEYS[4]
local retryz = KEYS[5]
local deadz = KEYS[6]
local ekey = KEYS[7]
local id = ARGV[6]
local who = ARGV[7]
local ttl = tonumber(ARGV[8])
if id == nil or id == '' or who == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR repoll cancel: bad arguments')
end
local f = redis.call('HMGET', tkey, 'state', 'hpend')
local state = f[1]
if not state then
  return 0
end
local now = now_ms()
redis.call('ZREM', duez, id)
redis.call('ZREM', leasez, id)
redis.call('ZREM', retryz, id)
redis.call('ZREM', deadz, id)
redis.call('DEL', tkey)
hist(hkey, now, 'cancelled', 'by admin ' .. who .. ' (was ' .. state .. ')',
  pending(state, f[2]))
redis.call('PEXPIRE', hkey, ttl)
event(ekey, now, 'cancelled', id, 'by admin ' .. who)
notify_task(id, 'cancelled', now)
notify_dash('cancelled', id, now)
return 1
