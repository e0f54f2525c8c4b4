-- heartbeat.lua: record a worker as alive. Its hash expires after ttl_ms without heartbeats;
-- the zset (id -> last seen) lets workers() list them without KEYS, and entries silent for
-- a day are dropped here. Publishes `worker_joined` on the dashboard channel when the worker
-- is new (nothing on later heartbeats: they would wake every open dashboard every few seconds).
-- KEYS[1] workers zset   KEYS[2] worker hash
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] host   ARGV[9] pid   ARGV[10] started_ms   ARGV[11] in_flight
-- ARGV[12] completed   ARGV[13] dead   ARGV[14] ttl_ms
-- Returns the Redis time of this heartbeat (ms).
local workersz = KEYS[1]
local wkey = KEYS[2]
local id = ARGV[7]
local ttl = tonumber(ARGV[14])
if id == nil or id == '' or ARGV[8] == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR repoll heartbeat: bad arguments')
end
for i = 9, 13 do
  if tonumber(ARGV[i]) == nil then return redis.error_reply('ERR repoll heartbeat: bad number') end
end
local now = now_ms()
-- HSET answers how many fields were new: all of them on a worker's first heartbeat (or its
-- first after its record expired), none later. That is news for the dashboard's workers
-- table. No "id" field: the message is about the queue, not a task.
local added = redis.call('HSET', wkey, 'id', id, 'host', ARGV[8], 'pid', ARGV[9],
  'started', ARGV[10], 'in_flight', ARGV[11], 'completed', ARGV[12], 'dead', ARGV[13],
  'last_seen', fmt(now))
if added > 0 then
  redis.call('PUBLISH', CH_DASH, '{"kind":"worker_joined","worker":' .. cjson.encode(id)
    .. ',"at_ms":' .. fmt(now) .. '}')
end
redis.call('PEXPIRE', wkey, ttl)
redis.call('ZADD', workersz, now, id)
redis.call('ZREMRANGEBYSCORE', workersz, '-inf', now - 86400000)
return now
