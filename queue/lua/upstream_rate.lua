-- upstream_rate.lua: one permit of the queue-wide rate limit on upstream calls, shared by
-- every worker process (GCRA: a "theoretical arrival time" per queue, in microseconds of the
-- Redis clock). Admits up to `burst` calls at once and `per_sec` a second on average.
-- KEYS: upstream_rate
-- ARGV[1..6] common   ARGV[7] per_sec (>= 1)   ARGV[8] burst (>= 1)
-- Returns 0 when the call may go now (the permit is taken), else the milliseconds to wait
-- before asking again (nothing written).
local key = K.upstream_rate
local per_sec = tonumber(ARGV[7])
local burst = tonumber(ARGV[8])
if per_sec == nil or per_sec < 1 or burst == nil or burst < 1 then
  return redis.error_reply('ERR repoll upstream_rate: bad arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = 1000000 / per_sec
local tat = tonumber(redis.call('GET', key) or '') or now
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - burst * interval
if allow_at > now then
  return math.max(1, math.ceil((allow_at - now) / 1000))
end
-- Kept only while it matters: once `now` passes it, the limiter is back to a full burst.
redis.call('SET', key, string.format('%d', math.ceil(new_tat)), 'PX',
  math.max(1, math.ceil((new_tat - now) / 1000)))
return 0
