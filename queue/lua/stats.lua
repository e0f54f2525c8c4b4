-- stats.lua (read-only): every count in one consistent snapshot, each O(log n) or O(1); never
-- a scan. Ready = due-now members of the due zset + both ready lists + the fair zset.
-- Undeclared keys (read only, derived from ARGV[6]): the task hashes {q}:t:<id> at the head of
-- the two ready lists and of the fair zset, for the oldest ready age (ready since `u`, else
-- created `c`; the fair zset's head is its next in turn, close to but not always its oldest).
-- KEYS: ready ready_bg due lease dead retry results paused tp fair
-- ARGV[1..6] common   ARGV[7] result_ttl_ms   ARGV[8] buckets (minutes of throughput)
-- Returns {ready, waiting, retrying, leased, stuck, dead, results, oldest_ready (-1 = none),
--          paused (0/1), now, ready_background,
--          {minute, completed, failed, polled, ttr_sum, ttr_count, fresh, stale, miss, negative,
--           ahead, refresh_failed, dead}...}
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local leasez = K.lease
local deadz = K.dead
local retryz = K.retry
local resultsz = K.results
local paused = K.paused
local tp = K.tp
local fairz = K.fair
local ttl = tonumber(ARGV[7])
local buckets = tonumber(ARGV[8])
if ttl == nil or buckets == nil or buckets < 0 or buckets > 1440 then
  return redis.error_reply('ERR repoll stats: bad arguments')
end
local now = now_ms()
local due_now = redis.call('ZCOUNT', duez, '-inf', now)
local later = redis.call('ZCOUNT', duez, '(' .. fmt(now), '+inf')
local retrying = redis.call('ZCOUNT', retryz, '(' .. fmt(now), '+inf')
local ilen = redis.call('LLEN', readyk)
local blen = redis.call('LLEN', bgk)
local flen = redis.call('ZCARD', fairz)
local leased = redis.call('ZCARD', leasez)
local stuck = redis.call('ZCOUNT', leasez, '-inf', '(' .. fmt(now))
local dead = redis.call('ZCARD', deadz)
local results = redis.call('ZCOUNT', resultsz, '(' .. fmt(now - ttl), '+inf')
local oldest = -1
local function older(t)
  if t and t >= 0 and (oldest < 0 or t < oldest) then oldest = t end
end
if due_now > 0 then
  older(tonumber(redis.call('ZRANGE', duez, 0, 0, 'WITHSCORES')[2]))
end
local heads = { redis.call('LINDEX', readyk, 0), redis.call('LINDEX', bgk, 0) }
if flen > 0 then
  local m = redis.call('ZRANGE', fairz, 0, 0)[1]
  heads[#heads + 1] = string.match(m, '([^|]*)$')
end
for _, head in ipairs(heads) do
  if head then
    local f = redis.call('HMGET', PREFIX .. 't:' .. head, 'u', 'c')
    older(tonumber(f[1] or f[2]))
  end
end
local out = { due_now + ilen + blen + flen, math.max(later - retrying, 0), retrying, leased, stuck, dead,
  results, oldest, redis.call('EXISTS', paused), now, blen }
local minute = now - (now % 60000)
-- The counters of each minute, in the reply's order (ttr_count is not one: see below); the
-- answers by freshness and the refreshes are enqueue.lua's and fail.lua's; 'dead' counts tasks
-- that died (each once), apart from 'failed', which counts failed calls.
local COUNTERS = { 'completed', 'failed', 'polled', 'ttr_sum', 'fresh', 'stale', 'miss',
  'negative', 'ahead', 'refresh_failed', 'dead' }
local nc = #COUNTERS
local fields = {}
for i = buckets - 1, 0, -1 do
  local m = fmt(minute - i * 60000)
  for _, c in ipairs(COUNTERS) do fields[#fields + 1] = m .. ':' .. c end
end
local vals = {}
if #fields > 0 then vals = redis.call('HMGET', tp, unpack(fields)) end
for i = 0, buckets - 1 do
  local b = { minute - (buckets - 1 - i) * 60000 }
  for j = 1, 4 do b[j + 1] = num(vals[i * nc + j], 0) end
  -- ttr_count: every completion counts its time to result (no separate counter is kept).
  b[6] = b[2]
  for j = 5, nc do b[j + 2] = num(vals[i * nc + j], 0) end
  out[#out + 1] = b
end
return out
