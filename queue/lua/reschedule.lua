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
local f = redis.call('HMGET', tkey, 'state', 'token', 'polls', 'attempts', 'deadline', 'worker',
  'hpend')
if f[1] ~= 'leased' or f[2] ~= token then
  return { 'stale' }
end
local now = now_ms()
local now_s = fmt(now)
local polls = num(f[3], 0) + 1
local attempts = num(f[4], 0)
local deadline = num(f[5], 0)
local due_at = now + delay
local pend = pending(f[1], f[7])
bump(tp, tpmin, now, 'polled', 1)
redis.call('ZREM', leasez, id)
if deadline > 0 and due_at > deadline then
  if has_partial == '1' then
    redis.call('HSET', tkey, 'polls', fmt(polls), 'partial', partial, 'has_partial', '1')
  else
    redis.call('HSET', tkey, 'polls', fmt(polls))
  end
  to_dead(tkey, hkey, ekey, deadz, id, now, 'deadline', 'next poll after the deadline', pend)
  notify_dash('dead', id, now)
  return { 'dead', 'deadline' }
end
-- Inline to_due with one HSET: a leased task is never a member of the retry zset (claim
-- removed it), so only attempts > 0 needs a ZADD there.
local due_s = fmt(due_at)
redis.call('ZADD', duez, due_at, id)
if attempts > 0 then
  redis.call('ZADD', retryz, due_at, id)
end
if has_partial == '1' then
  redis.call('HSET', tkey, 'polls', fmt(polls), 'partial', partial, 'has_partial', '1',
    'state', 'due', 'due', due_s, 'updated', now_s, 'lease_deadline', '0', 'worker', '')
else
  redis.call('HSET', tkey, 'polls', fmt(polls),
    'state', 'due', 'due', due_s, 'updated', now_s, 'lease_deadline', '0', 'worker', '')
end
hist(hkey, now, 'polled', 'still processing (poll ' .. fmt(polls) .. ', ' .. fmt(latency)
  .. ' ms), next poll at ' .. due_s, pend)
notify_task(id, 'rescheduled', now)
notify_dash('rescheduled', id, now)
if delay == 0 then notify_wake('rescheduled', id, now) end
return { 'ok', due_at }
