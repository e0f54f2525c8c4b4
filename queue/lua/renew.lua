-- renew.lua: extend a live lease. Only the current token may renew (fencing).
-- KEYS: task lease
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] token   ARGV[9] lease_ms
-- Returns {'ok', new_deadline} | {'stale'}
local tkey = K.task
local leasez = K.lease
local id = ARGV[7]
local token = ARGV[8]
local lease_ms = tonumber(ARGV[9])
if id == nil or id == '' or token == nil or lease_ms == nil or lease_ms < 1 then
  return redis.error_reply('ERR repoll renew: bad arguments')
end
local f = redis.call('HMGET', tkey, 's', 'tk')
if f[1] ~= 'leased' or f[2] ~= token then
  return { 'stale' }
end
local deadline = now_ms() + lease_ms
redis.call('ZADD', leasez, deadline, id)
redis.call('HSET', tkey, 'ld', fmt(deadline))
return { 'ok', deadline }
