-- heartbeat.lua: record a repoll process as alive, in the registry of its kind (workers, or web
-- processes: a `serve` with no worker still accepts queries, so it registers too). Its hash
-- expires after ttl_ms without heartbeats; the zset (id -> last seen) lets the registry be
-- listed without KEYS, and entries silent for a day are dropped here. Publishes
-- `worker_joined` on the dashboard channel when a worker is new (nothing on later heartbeats:
-- they would wake every open dashboard every few seconds; nothing for a web process: the
-- dashboard lists workers only).
-- Also answers the queue's layout as recorded in the meta hash, so a running process learns
-- at no extra round trip that `repoll admin repartition` changed it under it; and, for a
-- worker, the command an admin left in its hash (`command`: worker_command.lua), so the
-- command reaches it on its next heartbeat wherever it runs, and none is lost to a missed
-- message. A worker whose mode changes (running / quiet / stopping) publishes
-- `worker_mode`, so open dashboards re-read at once.
-- KEYS: <index> <entry> meta (the registry zset and the process's hash of its kind; the
-- queue's meta hash, read only)
-- ARGV[1..6] common   ARGV[7] kind ('worker' | 'web')   ARGV[8] id   ARGV[9] host   ARGV[10] pid
-- ARGV[11] started_ms   ARGV[12] ttl_ms   and for a worker: ARGV[13] in_flight
-- ARGV[14] completed   ARGV[15] dead   ARGV[16] mode ('running' | 'quiet' | 'stopping')
-- ARGV[17] resident memory in bytes ('' = unknown)
-- Returns {Redis time of this heartbeat (ms), meta `partitions` | false, meta `moving_to` | false,
--   the worker's pending command ('quiet' | 'stop') | false}.
local regz = K.index
local pkey = K.entry
local metak = K.meta
local kind = ARGV[7]
local id = ARGV[8]
local ttl = tonumber(ARGV[12])
if (kind ~= 'worker' and kind ~= 'web') or id == nil or id == '' or ARGV[9] == nil
  or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR repoll heartbeat: bad arguments')
end
local last = 11
if kind == 'worker' then last = 15 end
for i = 10, last do
  if tonumber(ARGV[i]) == nil then return redis.error_reply('ERR repoll heartbeat: bad number') end
end
local mode = ARGV[16]
if kind == 'worker' and ((mode ~= 'running' and mode ~= 'quiet' and mode ~= 'stopping')
    or ARGV[17] == nil or (ARGV[17] ~= '' and tonumber(ARGV[17]) == nil)) then
  return redis.error_reply('ERR repoll heartbeat: bad mode or memory')
end
local layout = redis.call('HMGET', metak, 'partitions', 'moving_to')
local now = now_ms()
local rec = { 'id', id, 'host', ARGV[9], 'pid', ARGV[10], 'started', ARGV[11],
  'last_seen', fmt(now) }
if kind == 'worker' then
  for _, f in ipairs({ { 'in_flight', 13 }, { 'completed', 14 }, { 'dead', 15 }, { 'mode', 16 },
      { 'rss', 17 } }) do
    rec[#rec + 1] = f[1]; rec[#rec + 1] = ARGV[f[2]]
  end
end
local before = { false, false }
if kind == 'worker' then before = redis.call('HMGET', pkey, 'mode', 'command') end
-- HSET answers how many fields were new: all of them on a process's first heartbeat (or its
-- first after its record expired), none later. That is news for the dashboard's workers
-- table. No "id" field in the message: it is about the queue, not a task.
local added = redis.call('HSET', pkey, unpack(rec))
if added > 0 and kind == 'worker' then
  redis.call('PUBLISH', CH_DASH, '{"kind":"worker_joined","worker":' .. cjson.encode(id)
    .. ',"at_ms":' .. fmt(now) .. '}')
elseif kind == 'worker' and before[1] ~= mode then
  redis.call('PUBLISH', CH_DASH, '{"kind":"worker_mode","worker":' .. cjson.encode(id)
    .. ',"mode":' .. cjson.encode(mode) .. ',"at_ms":' .. fmt(now) .. '}')
end
redis.call('PEXPIRE', pkey, ttl)
redis.call('ZADD', regz, now, id)
redis.call('ZREMRANGEBYSCORE', regz, '-inf', now - 86400000)
return { now, layout[1] or false, layout[2] or false, before[2] or false }
