-- purge.lua: one bounded chunk of a purge. The Rust side reads a chunk of ids (<= 500) from
-- the target's zset and loops, so Redis is never blocked for long. Each id is re-checked here
-- (still a member) before anything is deleted. Ready lists are purged by purge_ready.lua.
-- A purged task with a job API's job (`j`) leaves the job in `cancels` (cancel.lua says how).
-- KEYS: due retry dead results events cancels
-- KEYS per item: task hist result partial
-- ARGV[1..6] common   ARGV[7] target ('dead'|'results'|'history'|'queued')   ARGV[8] who
-- ARGV[8+i] id i
-- Returns the number of items removed in this chunk.
local duez = K.due
local retryz = K.retry
local deadz = K.dead
local resultsz = K.results
local ekey = K.events
local target = ARGV[7]
local who = ARGV[8]
local n = #ARGV - 8
if who == nil or n < 0 or item_count(KEYS, ITEM_KEYS) ~= n or not (target == 'dead' or target == 'results'
  or target == 'history' or target == 'queued') then
  return redis.error_reply('ERR repoll purge: bad arguments')
end
local now = now_ms()
local count = 0
for i = 1, n do
  local id = ARGV[8 + i]
  local tkey, hkey, rkey, pkey = item_keys(KEYS, ITEM_KEYS, i)
  if target == 'dead' then
    if redis.call('ZSCORE', deadz, id) then
      redis.call('ZREM', deadz, id)
      local f = redis.call('HMGET', tkey, 's', 'j')
      if f[1] == 'dead' then
        queue_upstream_cancel(K.cancels, id, f[2], now)
        redis.call('DEL', tkey, hkey, pkey)
      end
      count = count + 1
    end
  elseif target == 'queued' then
    if redis.call('ZSCORE', duez, id) then
      redis.call('ZREM', duez, id)
      redis.call('ZREM', retryz, id)
      local f = redis.call('HMGET', tkey, 's', 'j')
      if f[1] == 'due' then
        queue_upstream_cancel(K.cancels, id, f[2], now)
        redis.call('DEL', tkey, hkey, pkey)
      end
      count = count + 1
    end
  elseif target == 'results' then
    if redis.call('ZSCORE', resultsz, id) then
      redis.call('ZREM', resultsz, id)
      redis.call('DEL', rkey)
      if redis.call('EXISTS', tkey) == 0 then
        redis.call('DEL', hkey)
      end
      count = count + 1
    end
  else
    count = count + redis.call('DEL', hkey)
  end
end
if count > 0 then
  event(ekey, now, 'purged', '', fmt(count) .. ' ' .. target .. ' by admin ' .. who)
  notify_dash('purged', '', now)
end
return count
