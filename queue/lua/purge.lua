-- purge.lua: one bounded chunk of a purge. The Rust side reads a chunk of ids (<= 500) from
-- the target's zset and loops, so Redis is never blocked for long. Each id is re-checked here
-- (still a member) before anything is deleted. Ready lists are purged by purge_ready.lua.
-- KEYS[1] due zset   KEYS[2] retry zset   KEYS[3] dead zset   KEYS[4] results index zset
-- KEYS[5] events stream
-- KEYS[2+4i] task hash i   KEYS[3+4i] history i   KEYS[4+4i] result i   KEYS[5+4i] partial i
-- ARGV[1..6] common   ARGV[7] target ('dead'|'results'|'history'|'queued')   ARGV[8] who
-- ARGV[8+i] id i
-- Returns the number of items removed in this chunk.
local duez = KEYS[1]
local retryz = KEYS[2]
local deadz = KEYS[3]
local resultsz = KEYS[4]
local ekey = KEYS[5]
local target = ARGV[7]
local who = ARGV[8]
local n = #ARGV - 8
if who == nil or n < 0 or #KEYS ~= 5 + 4 * n or not (target == 'dead' or target == 'results'
  or target == 'history' or target == 'queued') then
  return redis.error_reply('ERR repoll purge: bad arguments')
end
local now = now_ms()
local count = 0
for i = 1, n do
  local id = ARGV[8 + i]
  local tkey = KEYS[2 + 4 * i]
  local hkey = KEYS[3 + 4 * i]
  local rkey = KEYS[4 + 4 * i]
  local pkey = KEYS[5 + 4 * i]
  if target == 'dead' then
    if redis.call('ZSCORE', deadz, id) then
      redis.call('ZREM', deadz, id)
      if redis.call('HGET', tkey, 's') == 'dead' then
        redis.call('DEL', tkey, hkey, pkey)
      end
      count = count + 1
    end
  elseif target == 'queued' then
    if redis.call('ZSCORE', duez, id) then
      redis.call('ZREM', duez, id)
      redis.call('ZREM', retryz, id)
      if redis.call('HGET', tkey, 's') == 'due' then
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
