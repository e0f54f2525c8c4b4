-- heartbeat.lua: record a worker as alive. Its hash expires after ttl_ms without heartbeats;
-- the zset (id -> last seen) lets workers() list them without KEYS, and entries silent for
-- a day are dropped here. Publishes `worker_joined` on the dashboard channel when the worker
-- is new (nothing on later heartbeats: they would wake every open dashboard every few seconds).
-- KEYS[1] workers zset   KEYS[2] worker hash
-- ARGV[1..5] common   ARGV[6] id   ARGV[7] host   ARGV[8] pid   ARGV[9] started_ms   ARGV[10] in_flight
-- ARGV[11] processed   ARGV[12] failed   ARGV[13] ttl_ms
-- Returns the Redis time of this heartbeat (ms).
local workersz = KEYS[1]
local wkey = KEYS[2]
local id = ARGV[6]
local ttl = tonumber(ARGV[13])
if id == nil or id == '' or ARGV[7] == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR repoll heartbeat: bad arguments')
end
for i = 8, 12 do
  if tonumber(ARGV[i]) == nil then return redis.error_reply('ERR repoll heartbeat: bad number') end
end
local now = now_ms()
-- HSET answers how many fields were new: all of them on a worker's first heartbeat (or its
-- first after its record expired), none later. That is news for the dashboard's workers
-- table. No "id" field: the message is about the queue, not a task.
local added = redis.call('HSET', wkey, 'id', id, 'host', ARGV[7], 'pid', ARGV[8],
  'started', ARGV[9], 'in_flight', ARGV[10], 'processed', ARGV[11], 'failed', ARGV[12],
  'last_seen', fmt(now))
if added > 0 then
  redis.call('PUBLISH', CH_DASH, '{"kind":"worker_joined","worker":' .. cjson.encode(id)
    .. ',"at_ms":' .. fmt(now) .. '}')
end
redis.call('PEXPIRE', wkey, ttl)
redis.call('ZADD', workersz, now, id)
redis.call('ZREMRANGEBYSCORE', workersz, '-inf', now - 86400000)
return now
