-- reschedule.lua: "still processing, poll again later". Counts a poll, never an attempt.
-- A next poll beyond the whole-life deadline makes the task dead with reason 'deadline'.
-- KEYS[1] task hash   KEYS[2] history   KEYS[3] due zset   KEYS[4] lease zset   KEYS[5] retry zset
-- KEYS[6] dead zset   KEYS[7] events stream   KEYS[8] throughput hash   KEYS[9] throughput minutes
-- ARGV[1..5] common   ARGV[6] id   ARGV[7] token   ARGV[8] delay_ms   ARGV[9] has_partial (0/1)
-- ARGV[10] partial   ARGV[11] latency_ms
-- Returns {'ok', due_at} | {'dead', reason} | {'stale'}
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
local delay = tonumber(ARGV[8])
local has_partial = ARGV[9]
local partial = ARGV[10]
local latency = tonumber(ARGV[11])
if id == nil or id == '' or token == nil or delay == nil or delay < 0 or partial == nil
  or latency == nil or (has_partial ~= '0' and has_partial ~= '1') then
  return redis.error_reply('ERR repoll reschedule: bad arguments')
end
local f = redis.call('HMGET', tkey, 'state', 'token', 'polls', 'attempts', 'deadline', 'worker')
if f[1] ~= 'leased' or f[2] ~= token then
  return { 'stale' }
end
local now = now_ms()
local polls = num(f[3], 0) + 1
local attempts = num(f[4], 0)
local deadline = num(f[5], 0)
local due_at = now + delay
redis.call('HSET', tkey, 'polls', fmt(polls))
if has_partial == '1' then
  redis.call('HSET', tkey, 'partial', partial, 'has_partial', '1')
end
bump(tp, tpmin, now, 'polled', 1)
redis.call('ZREM', leasez, id)
if deadline > 0 and due_at > deadline then
  to_dead(tkey, hkey, ekey, deadz, id, now, 'deadline', 'next poll after the deadline')
  notify_dash('dead', id, now)
  return { 'dead', 'deadline' }
end
to_due(tkey, duez, retryz, id, due_at, attempts, now)
hist(hkey, now, 'polled', 'still processing (poll ' .. fmt(polls) .. ', ' .. fmt(latency)
  .. ' ms), next poll at ' .. fmt(due_at))
notify_task(id, 'rescheduled', now)
notify_dash('rescheduled', id, now)
if delay == 0 then notify_wake('rescheduled', id, now) end
return { 'ok', due_at }
