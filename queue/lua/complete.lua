-- complete.lua: store final results and remove the tasks, for one or many leases in one call
-- (batching amortises the script call for workers that finish many tasks at once). Each item
-- is refused (nothing written for it) unless it carries the current lease token, so a worker
-- whose lease was lost can never ack.
-- Cost per completed task: HMGET, HSET + PEXPIRE (result), DEL (record), LPUSH (+ deferred
-- "claimed" entry) + PEXPIRE (history), PUBLISH (task channel). Per call: one variadic ZADD
-- (results index), one variadic ZREM (lease), one XADD, the throughput counters and one
-- dashboard PUBLISH carrying every id.
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
local now_s = fmt(now)
local mprefix = '{"kind":"completed","id":"'
local msuffix = '","at_ms":' .. now_s .. '}'
local out = {}
local ids = {}
local index_args = {}
local ttr = 0
local who1 = nil
local one_worker = true
for i = 1, n do
  local id = ARGV[3 + 4 * i]
  local token = ARGV[4 + 4 * i]
  local tkey = KEYS[3 + 3 * i]
  local hkey = KEYS[4 + 3 * i]
  local rkey = KEYS[5 + 3 * i]
  local f = redis.call('HMGET', tkey, 'state', 'token', 'query', 'created', 'polls', 'worker',
    'hpend')
  if f[1] ~= 'leased' or f[2] ~= token then
    out[i] = 0
  else
    local created = num(f[4], now)
    local who = f[6] or '?'
    -- fixed field set, so HSET overwrites any older result completely
    redis.call('HSET', rkey, 'id', id, 'query', f[3] or '', 'data', ARGV[5 + 4 * i],
      'completed', now_s, 'created', fmt(created), 'polls', fmt(num(f[5], 0)))
    redis.call('PEXPIRE', rkey, ttl)
    redis.call('DEL', tkey)
    hist(hkey, now, 'completed', 'by ' .. who .. ' token ' .. token .. ' in '
      .. ARGV[6 + 4 * i] .. ' ms', pending(f[1], f[7]))
    -- History of a finished task lives as long as its result.
    redis.call('PEXPIRE', hkey, ttl)
    redis.call('PUBLISH', CH_TASK .. id, mprefix .. id .. msuffix)
    ids[#ids + 1] = id
    index_args[#index_args + 1] = now_s
    index_args[#index_args + 1] = id
    ttr = ttr + math.max(now - created, 0)
    if who1 == nil then
      who1 = who
    elseif who ~= who1 then
      one_worker = false
    end
    out[i] = 1
  end
end
local done = #ids
if done > 0 then
  redis.call('ZADD', resultsz, unpack(index_args))
  redis.call('ZREM', leasez, unpack(ids))
  if done == 1 then
    event(ekey, now, 'completed', ids[1], 'by ' .. who1)
  else
    event(ekey, now, 'completed', ids[1],
      fmt(done) .. ' tasks' .. (one_worker and (' by ' .. who1) or ''))
  end
  bump(tp, tpmin, now, 'completed', done)
  bump(tp, tpmin, now, 'ttr_sum', ttr)
  bump(tp, tpmin, now, 'ttr_count', done)
  notify_dash_batch('completed', ids, now)
end
return out
