-- release.lua: end a lease now and make the task ready now (worker shutting down, or admin).
-- With a token only that lease may be released; without one (admin) any live lease.
-- KEYS: task hist ready ready_bg due lease retry events wakeups fairc
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] token ('' = admin)   ARGV[9] who
-- Returns {'ok'} | {'no'} (admin: nothing leased) | {'stale'} (token given, not current)
local tkey = K.task
local hkey = K.hist
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local leasez = K.lease
local retryz = K.retry
local ekey = K.events
local fairc = K.fairc
local id = ARGV[7]
local token = ARGV[8]
local who = ARGV[9]
if id == nil or id == '' or token == nil or who == nil then
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
wake_workers(K.wakeups, 1)
return { 'ok' }
