-- release.lua: end a lease now and make the task due now (worker shutting down, or admin).
-- With a token only that lease may be released; without one (admin) any live lease.
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] due zset   KEYS[4] lease zset   KEYS[5] retry zset
-- KEYS[6] events stream
-- ARGV[1..5] common   ARGV[6] id   ARGV[7] token ('' = admin)   ARGV[8] who
-- Returns {'ok'} | {'no'} (admin: nothing leased) | {'stale'} (token given, not current)
local tkey = KEYS[1]
local hkey = KEYS[2]
local duez = KEYS[3]
local leasez = KEYS[4]
local retryz = KEYS[5]
local ekey = KEYS[6]
local id = ARGV[6]
local token = ARGV[7]
local who = ARGV[8]
if id == nil or id == '' or token == nil or who == nil then
  return redis.error_reply('ERR repoll release: bad arguments')
end
local f = redis.call('HMGET', tkey, 'state', 'token', 'attempts', 'worker', 'hpend')
if f[1] ~= 'leased' or (token ~= '' and f[2] ~= token) then
  if token ~= '' then return { 'stale' } end
  return { 'no' }
end
local now = now_ms()
redis.call('ZREM', leasez, id)
to_due(tkey, duez, retryz, id, now, num(f[3], 0), now)
local by = token == '' and ('by admin ' .. who) or ('by ' .. who)
hist(hkey, now, 'released', by .. ' (lease of ' .. (f[4] or '?') .. ' token ' .. (f[2] or '?') .. ')',
  pending(f[1], f[5]))
event(ekey, now, 'released', id, by)
notify_task(id, 'released', now)
notify_dash('released', id, now)
notify_wake('released', id, now)
return { 'ok' }
