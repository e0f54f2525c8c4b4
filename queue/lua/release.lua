-- release.lua: end a lease now and make the task ready now (worker shutting down, or admin).
-- With a token only that lease may be released; without one (admin) any live lease.
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] ready list   KEYS[4] background ready list
-- KEYS[5] due zset   KEYS[6] lease zset   KEYS[7] retry zset   KEYS[8] events stream
-- KEYS[9] wake-up list   KEYS[10] leases held per tenant (prelude/fair.lua)
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] token ('' = admin)   ARGV[9] who
-- Returns {'ok'} | {'no'} (admin: nothing leased) | {'stale'} (token given, not current)
local tkey = KEYS[1]
local hkey = KEYS[2]
local readyk = KEYS[3]
local bgk = KEYS[4]
local duez = KEYS[5]
local leasez = KEYS[6]
local retryz = KEYS[7]
local ekey = KEYS[8]
local fairc = KEYS[10]
local id = ARGV[7]
local token = ARGV[8]
local who = ARGV[9]
if id == nil or id == '' or token == nil or who == nil or #KEYS ~= 10 then
  return redis.error_reply('ERR repoll release: bad arguments')
end
local f = redis.call('HMGET', tkey, 's', 'tk', 'a', 'w', 'pr', 'u', 'tn')
if f[1] ~= 'leased' or (token ~= '' and f[2] ~= token) then
  if token ~= '' then return { 'stale' } end
  return { 'no' }
end
local now = now_ms()
redis.call('ZREM', leasez, id)
fair_release(fairc, f[7])
to_due(tkey, readyk, bgk, duez, retryz, id, f[5], now, num(f[3], 0), now)
hist_claim(hkey, num(f[6], now), 'by ' .. (f[4] or '?') .. ' token ' .. (f[2] or '?'))
local by = token == '' and ('by admin ' .. who) or ('by ' .. who)
hist(hkey, now, 'released', by .. ' (lease of ' .. (f[4] or '?') .. ' token ' .. (f[2] or '?') .. ')')
event(ekey, now, 'released', id, by)
notify_dash('released', id, now)
wake_workers(KEYS[9], 1)
return { 'ok' }
