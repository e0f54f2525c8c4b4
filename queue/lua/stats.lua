-- stats.lua (read-only): every count in one consistent snapshot, each O(log n); never a scan.
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] dead zset   KEYS[4] retry zset
-- KEYS[5] results index zset   KEYS[6] paused flag   KEYS[7] throughput hash
-- ARGV[1..5] common   ARGV[6] result_ttl_ms   ARGV[7] buckets (minutes of throughput)
-- Returns {ready, waiting, retrying, leased, stuck, dead, results, oldest_due (-1 = none),
--          paused (0/1), now, {minute, completed, failed, polled, ttr_sum, ttr_count}...}
local duez = KEYS[1]
local leasez = KEYS[2]
local deadz = KEYS[3]
local retryz = KEYS[4]
local resultsz = KEYS[5]
local paused = KEYS[6]
local tp = KEYS[7]
local ttl = tonumber(ARGV[6])
local buckets = tonumber(ARGV[7])
if ttl == nil or buckets == nil or buckets < 0 or buckets > 1440 then
  return redis.error_reply('ERR repoll stats: bad arguments')
end
local now = now_ms()
local ready = redis.call('ZCOUNT', duez, '-inf', now)
local later = redis.call('ZCOUNT', duez, '(' .. fmt(now), '+inf')
local retrying = redis.call('ZCOUNT', retryz, '(' .. fmt(now), '+inf')
local leased = redis.call('ZCARD', leasez)
local stuck = redis.call('ZCOUNT', leasez, '-inf', '(' .. fmt(now))
local dead = redis.call('ZCARD', deadz)
local results = redis.call('ZCOUNT', resultsz, '(' .. fmt(now - ttl), '+inf')
local oldest = -1
local first = redis.call('ZRANGE', duez, 0, 0, 'WITHSCORES')
if #first == 2 then oldest = tonumber(first[2]) end
local out = { ready, math.max(later - retrying, 0), retrying, leased, stuck, dead, results, oldest,
  redis.call('EXISTS', paused), now }
local minute = now - (now % 60000)
local fields = {}
for i = buckets - 1, 0, -1 do
  local m = fmt(minute - i * 60000)
  fields[#fields + 1] = m .. ':completed'
  fields[#fields + 1] = m .. ':failed'
  fields[#fields + 1] = m .. ':polled'
  fields[#fields + 1] = m .. ':ttr_sum'
  fields[#fields + 1] = m .. ':ttr_count'
end
local vals = {}
if #fields > 0 then vals = redis.call('HMGET', tp, unpack(fields)) end
for i = 0, buckets - 1 do
  local b = { minute - (buckets - 1 - i) * 60000 }
  for j = 1, 5 do b[j + 1] = num(vals[i * 5 + j], 0) end
  out[#out + 1] = b
end
return out
