-- enqueue.lua: create a task due now, join the live one, or hand back a fresh stored result.
-- Atomic, so 50 concurrent callers for one query get exactly one 'created'.
-- KEYS[1] task hash   KEYS[2] result hash   KEYS[3] due zset   KEYS[4] history list
-- KEYS[5] events stream   KEYS[6] dead zset   KEYS[7] retry zset
-- ARGV[1..5] common (see prelude)   ARGV[6] id   ARGV[7] normalised query   ARGV[8] payload
-- ARGV[9] deadline_ms (whole life, 0 = none)   ARGV[10] max_attempts (0 = unlimited)
-- Returns {'joined', task...} | {'stored', result...} | {'created', task...}
--   where task/result are HGETALL field/value lists.
local tkey = KEYS[1]
local rkey = KEYS[2]
local duez = KEYS[3]
local hkey = KEYS[4]
local ekey = KEYS[5]
local deadz = KEYS[6]
local retryz = KEYS[7]
local id = ARGV[6]
local query = ARGV[7]
local payload = ARGV[8]
local deadline_ms = tonumber(ARGV[9])
local max_attempts = tonumber(ARGV[10])
if id == nil or id == '' or query == nil or query == '' or payload == nil
  or deadline_ms == nil or deadline_ms < 0 or max_attempts == nil or max_attempts < 0 then
  return redis.error_reply('ERR repoll enqueue: bad arguments')
end

local now = now_ms()
local state = redis.call('HGET', tkey, 'state')
if state == 'due' or state == 'leased' then
  return { 'joined', redis.call('HGETALL', tkey) }
end
if state ~= 'dead' and redis.call('EXISTS', rkey) == 1 then
  return { 'stored', redis.call('HGETALL', rkey) }
end

local again = false
if state == 'dead' then
  -- Asking again for a dead query starts a fresh life; the old history stays.
  redis.call('ZREM', deadz, id)
  redis.call('DEL', tkey)
  again = true
end
local deadline = 0
if deadline_ms > 0 then deadline = now + deadline_ms end
redis.call('HSET', tkey,
  'id', id, 'query', query, 'payload', payload, 'state', 'due',
  'created', fmt(now), 'updated', fmt(now), 'attempts', '0', 'polls', '0',
  'max_attempts', fmt(max_attempts), 'token', '0', 'worker', '', 'last_error', '',
  'partial', '', 'has_partial', '0', 'deadline', fmt(deadline), 'due', fmt(now),
  'lease_deadline', '0', 'dead_reason', '', 'lease_losses', '0')
redis.call('ZADD', duez, now, id)
redis.call('ZREM', retryz, id)
redis.call('PERSIST', hkey)
hist(hkey, now, 'enqueued', again and 're-enqueued after dead' or 'due now')
event(ekey, now, 'enqueued', id, query)
notify_task(id, 'enqueued', now)
notify_dash('enqueued', id, now)
notify_wake('enqueued', id, now)
return { 'created', redis.call('HGETALL', tkey) }
