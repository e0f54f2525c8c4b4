-- complete.lua: store final results and remove the tasks, for one or many leases in one call
-- (batching amortises the script call for workers that finish many tasks at once). Each item
-- is refused (nothing written for it) unless it carries the current lease token, so a worker
-- whose lease was lost can never ack.
-- KEYS[1] results index zset   KEYS[2] lease zset   KEYS[3] events stream
-- KEYS[4] throughput hash   KEYS[5] throughput minutes zset
-- KEYS[3+3i] task hash i   KEYS[4+3i] history i   KEYS[5+3i] result hash i   (i = 1..n)
-- ARGV[1..5] common   ARGV[6] result_ttl_ms
-- ARGV[3+4i] id i   ARGV[4+4i] token i   ARGV[5+4i] result data i   ARGV[6+4i] latency_ms i
-- Returns {status_1, ..., status_n}: 1 = completed, 0 = stale token (nothing written).
local resultsz = KEYS[1]
local leasez = KEYS[2]
local ekey = KEYS[3]
local tp = KEYS[4]
local tpmin = KEYS[5]
local ttl = tonumber(ARGV[6])
local n = (#ARGV - 6) / 4
if ttl == nil or ttl < 1 or n < 1 or n ~= math.floor(n) or #KEYS ~= 5 + 3 * n then
  return redis.error_reply('ERR repoll complete: bad arguments')
end
for i = 1, n do
  if tonumber(ARGV[6 + 4 * i]) == nil or ARGV[3 + 4 * i] == '' then
    return redis.error_reply('ERR repoll complete: bad item')
  end
end
local now = now_ms()
local out = {}
local done = 0
local ttr = 0
local first = nil
for i = 1, n do
  local id = ARGV[3 + 4 * i]
  local token = ARGV[4 + 4 * i]
  local tkey = KEYS[3 + 3 * i]
  local hkey = KEYS[4 + 3 * i]
  local rkey = KEYS[5 + 3 * i]
  local f = redis.call('HMGET', tkey, 'state', 'token', 'query', 'created', 'polls', 'worker')
  if f[1] ~= 'leased' or f[2] ~= token then
    out[i] = 0
  else
    local created = num(f[4], now)
    local who = f[6] or '?'
    -- fixed field set, so HSET overwrites any older result completely
    redis.call('HSET', rkey, 'id', id, 'query', f[3] or '', 'data', ARGV[5 + 4 * i],
      'completed', fmt(now), 'created', fmt(created), 'polls', fmt(num(f[5], 0)))
    redis.call('PEXPIRE', rkey, ttl)
    redis.call('ZADD', resultsz, now, id)
    redis.call('ZREM', leasez, id)
    redis.call('DEL', tkey)
    hist(hkey, now, 'completed', 'by ' .. who .. ' token ' .. token .. ' in '
      .. ARGV[6 + 4 * i] .. ' ms')
    -- History of a finished task lives as long as its result.
    redis.call('PEXPIRE', hkey, ttl)
    event(ekey, now, 'completed', id, 'by ' .. who)
    notify_task(id, 'completed', now)
    done = done + 1
    ttr = ttr + math.max(now - created, 0)
    first = first or id
    out[i] = 1
  end
end
if done > 0 then
  bump(tp, tpmin, now, 'completed', done)
  bump(tp, tpmin, now, 'ttr_sum', ttr)
  bump(tp, tpmin, now, 'ttr_count', done)
  notify_dash('completed', first, now)
end
return out
