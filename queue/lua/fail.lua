-- fail.lua: the worker saw an error. Counts an attempt; the task goes back to due after the
-- backoff, or dead when attempts or the whole-life deadline are exhausted (or on Retry::Dead).
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] due zset   KEYS[4] lease zset   KEYS[5] retry zset
-- KEYS[6] dead zset   KEYS[7] events stream   KEYS[8] throughput hash   KEYS[9] throughput minutes
-- ARGV[1..5] common   ARGV[6] id   ARGV[7] token   ARGV[8] error   ARGV[9] mode ('after'|'dead')
-- ARGV[10] delay_ms   ARGV[11] latency_ms
-- Returns {'retry', due_at, attempts} | {'dead', reason} | {'stale'}
local tkey = KEYS[1]
local hkey = KEYS[2]
local duez = KEYS[3]
local leasez = KEYS[4]
local retryz = KEYS[5]
local deadz = KEYS[6]
local ekey = KEYS[7]
local tp = KEYS[8]
local tpmin = KEYS[9]
local id = ARGV[6]
local token = ARGV[7]
local err = ARGV[8]
local mode = ARGV[9]
local delay = tonumber(ARGV[10])
local latency = tonumber(ARGV[11])
if id == nil or id == '' or token == nil or err == nil or (mode ~= 'after' and mode ~= 'dead')
  or delay == nil or delay < 0 or latency == nil then
  return redis.error_reply('ERR repoll fail: bad arguments')
end
local f = redis.call('HMGET', tkey, 'state', 'token', 'attempts', 'max_attempts', 'deadline',
  'hpend')
local pend = pending(f[1], f[6])
if f[1] ~= 'leased' or f[2] ~= token then
  return { 'stale' }
end
local now = now_ms()
local attempts = num(f[3], 0) + 1
local max_attempts = num(f[4], 0)
local deadline = num(f[5], 0)
redis.call('HSET', tkey, 'attempts', fmt(attempts), 'last_error', err)
bump(tp, tpmin, now, 'failed', 1)
redis.call('ZREM', leasez, id)
local reason = nil
if mode == 'dead' then
  reason = 'fatal'
elseif max_attempts > 0 and attempts >= max_attempts then
  reason = 'max_attempts'
elseif deadline > 0 and now + delay > deadline then
  reason = 'deadline'
end
if reason then
  hist(hkey, now, 'error', err, pend)
  to_dead(tkey, hkey, ekey, deadz, id, now, reason, 'after ' .. fmt(attempts) .. ' attempts')
  notify_dash('dead', id, now)
  return { 'dead', reason }
end
local due_at = now + delay
to_due(tkey, duez, retryz, id, due_at, attempts, now)
hist(hkey, now, 'error', err .. ' -> retry at ' .. fmt(due_at) .. ' (attempt ' .. fmt(attempts) .. ')',
  pend)
event(ekey, now, 'failed', id, err)
notify_task(id, 'failed', now)
notify_dash('failed', id, now)
if delay == 0 then notify_wake('failed', id, now) end
return { 'retry', due_at, attempts }
