-- worker_command.lua: an admin's command to a worker process (quiet: claim nothing new; stop:
-- shut down gracefully), left in the worker's registry hash (`command`), which its next
-- heartbeat answers to it (heartbeat.lua). A field, not a message: a worker that misses a
-- message still reads it on its next heartbeat, and a worker that is gone takes it with its
-- hash. Only a live entry is written (no hash is created for a worker that is not there), and
-- a stop is final: a later quiet does not undo it. Publishes `worker_command` on the
-- dashboard channel.
-- KEYS: worker
-- ARGV[1..6] common   ARGV[7] worker id   ARGV[8] command ('quiet' | 'stop')
-- Returns 1 written, 0 no live worker with this id, 2 already told to stop (a quiet after a
-- stop; nothing written).
local wkey = K.worker
local id = ARGV[7]
local command = ARGV[8]
if id == nil or id == '' or (command ~= 'quiet' and command ~= 'stop') then
  return redis.error_reply('ERR repoll worker_command: bad arguments')
end
if redis.call('EXISTS', wkey) == 0 then return 0 end
if command == 'quiet' and redis.call('HGET', wkey, 'command') == 'stop' then return 2 end
redis.call('HSET', wkey, 'command', command)
redis.call('PUBLISH', CH_DASH, '{"kind":"worker_command","worker":' .. cjson.encode(id)
  .. ',"command":' .. cjson.encode(command) .. ',"at_ms":' .. fmt(now_ms()) .. '}')
return 1
