-- cancel.lua: admin removes a live task (due, leased or dead) for good. A worker still holding
-- its lease gets StaleToken on its next call. The history is kept for result_ttl_ms so the
-- cancellation stays visible. A task with a job API's job (`j`) leaves the job in `cancels`,
-- due now, for a worker to cancel upstream (cancel_take / cancel_settle): the operator's
-- action never waits for the upstream.
-- KEYS: task hist partial ready ready_bg due lease retry dead events fair fairc cancels
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] who   ARGV[9] result_ttl_ms
-- Returns 1 if a task was cancelled, 0 if there was none.
local tkey = K.task
local hkey = K.hist
local pkey = K.partial
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local leasez = K.lease
local retryz = K.retry
local deadz = K.dead
local ekey = K.events
local fairz = K.fair
local fairc = K.fairc
local id = ARGV[7]
local who = ARGV[8]
local ttl = tonumber(ARGV[9])
if id == nil or id == '' or who == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR repoll cancel: bad arguments')
end
local f = redis.call('HMGET', tkey, 's', 'pr', 'w', 'tk', 'u', 'tn', 'j')
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
if queue_upstream_cancel(K.cancels, id, f[7], now) then
  hist(hkey, now, 'upstream_cancel', 'queued for job ' .. f[7])
end
redis.call('PEXPIRE', hkey, ttl)
event(ekey, now, 'cancelled', id, 'by admin ' .. who)
notify_dash('cancelled', id, now)
return 1
