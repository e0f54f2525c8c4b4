-- cancel_settle.lua: the outcome of one upstream cancel a worker took (cancel_take.lua):
-- 'done' removes it; 'retry' puts it back due after `delay_ms` with one try more. Either way
-- the outcome goes to the task's history if the task still has one (a purged task's is gone,
-- and a history created here would never expire). A member no longer in the set (settled by
-- another worker after a lease ran out) changes nothing.
-- KEYS: cancels hist (the task's history)
-- ARGV[1..6] common   ARGV[7] member   ARGV[8] 'done' | 'retry'   ARGV[9] delay_ms
-- ARGV[10] what happened (for the history, at most 200 bytes)
-- Returns 1 when the member was settled, 0 when it was not there.
local member, mode, delay, what = ARGV[7], ARGV[8], tonumber(ARGV[9]), ARGV[10]
if member == nil or member == '' or (mode ~= 'done' and mode ~= 'retry') or delay == nil
  or delay < 0 or what == nil then
  return redis.error_reply('ERR repoll cancel_settle: bad arguments')
end
local tries, rest = string.match(member, '^(%d+)|(.+)$')
if not tries then
  return redis.error_reply('ERR repoll cancel_settle: bad member')
end
local hkey = K.hist
local known = redis.call('ZSCORE', K.cancels, member)
local has_history = redis.call('EXISTS', hkey) == 1
if not known then return 0 end
local now = now_ms()
redis.call('ZREM', K.cancels, member)
if mode == 'retry' then
  redis.call('ZADD', K.cancels, now + delay, fmt(tonumber(tries) + 1) .. '|' .. rest)
end
if has_history then
  hist(hkey, now, 'upstream_cancel', cut(what, 200))
end
return 1
