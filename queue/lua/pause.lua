-- pause.lua: pause or resume claiming for the whole queue (claims return nothing while the
-- flag exists). Recorded in the global event stream.
-- KEYS: paused events ready ready_bg due wakeups
-- (resume: one wake-up entry per task ready now)
-- ARGV[1..6] common   ARGV[7] mode ('pause' | 'resume')   ARGV[8] who
-- Returns 1 if the state changed, 0 if it already was so.
local paused = K.paused
local ekey = K.events
local mode = ARGV[7]
local who = ARGV[8]
if (mode ~= 'pause' and mode ~= 'resume') or who == nil then
  return redis.error_reply('ERR repoll pause: bad arguments')
end
local now = now_ms()
if mode == 'pause' then
  if redis.call('EXISTS', paused) == 1 then return 0 end
  redis.call('SET', paused, fmt(now) .. '|' .. who)
  event(ekey, now, 'paused', '', 'by admin ' .. who)
  notify_dash('paused', '', now)
  return 1
end
if redis.call('EXISTS', paused) == 0 then return 0 end
redis.call('DEL', paused)
event(ekey, now, 'resumed', '', 'by admin ' .. who)
notify_dash('resumed', '', now)
wake_workers(K.wakeups, redis.call('LLEN', K.ready) + redis.call('LLEN', K.ready_bg)
  + redis.call('ZCOUNT', K.due, '-inf', now))
return 1
