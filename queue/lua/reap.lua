-- reap.lua: phase two of reap, plus bounded housekeeping. Each candidate is re-validated: its
-- lease must still carry the deadline seen by the peek (so it was neither renewed nor
-- re-claimed meanwhile — a new claim or renew always moves the deadline) and be past it.
-- Expired leases go back to due now, or to dead as 'poison' after max_lease_losses losses
-- (or 'deadline' when the whole-life deadline has passed).
-- Housekeeping: throughput buckets older than the retention and result-index members older
-- than the result TTL are removed, at most 200 of each per call.
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] retry zset   KEYS[4] dead zset
-- KEYS[5] events stream   KEYS[6] throughput hash   KEYS[7] throughput minutes zset
-- KEYS[8] results index zset   KEYS[7+2i] task hash i   KEYS[8+2i] history i   (i = 1..n)
-- ARGV[1..5] common   ARGV[6] max_lease_losses (0 = never poison)   ARGV[7] throughput retention ms
-- ARGV[8] result_ttl_ms   ARGV[7+2i] id i   ARGV[8+2i] peeked deadline i
-- Returns {{requeued ids}, {dead ids}}
local duez = KEYS[1]
local leasez = KEYS[2]
local retryz = KEYS[3]
local deadz = KEYS[4]
local ekey = KEYS[5]
local tp = KEYS[6]
local tpmin = KEYS[7]
local resultsz = KEYS[8]
local max_losses = tonumber(ARGV[6])
local retention = tonumber(ARGV[7])
local ttl = tonumber(ARGV[8])
local n = (#ARGV - 8) / 2
if max_losses == nil or retention == nil or ttl == nil or n ~= math.floor(n) or #KEYS ~= 8 + 2 * n then
  return redis.error_reply('ERR repoll reap: bad arguments')
end
local now = now_ms()
local requeued = {}
local dead = {}
for i = 1, n do
  local id = ARGV[7 + 2 * i]
  local seen = ARGV[8 + 2 * i]
  local tkey = KEYS[7 + 2 * i]
  local hkey = KEYS[8 + 2 * i]
  local score = redis.call('ZSCORE', leasez, id)
  if score and tonumber(score) == tonumber(seen) and tonumber(score) <= now then
    local f = redis.call('HMGET', tkey, 'state', 'worker', 'token', 'lease_losses', 'attempts', 'deadline',
      'hpend')
    if f[1] == 'leased' then
      local losses = num(f[4], 0) + 1
      local deadline = num(f[6], 0)
      redis.call('ZREM', leasez, id)
      redis.call('HSET', tkey, 'lease_losses', fmt(losses))
      hist(hkey, now, 'lease_expired', 'from ' .. (f[2] or '?') .. ' token ' .. (f[3] or '?'),
        pending(f[1], f[7]))
      if max_losses > 0 and losses >= max_losses then
        to_dead(tkey, hkey, ekey, deadz, id, now, 'poison', fmt(losses) .. ' lease losses')
        dead[#dead + 1] = id
      elseif deadline > 0 and now > deadline then
        to_dead(tkey, hkey, ekey, deadz, id, now, 'deadline', 'lease expired after the deadline')
        dead[#dead + 1] = id
      else
        to_due(tkey, duez, retryz, id, now, num(f[5], 0), now)
        event(ekey, now, 'lease_expired', id, 'from ' .. (f[2] or '?'))
        notify_task(id, 'lease_expired', now)
        requeued[#requeued + 1] = id
      end
    elseif f[1] == false then
      redis.call('ZREM', leasez, id)
      event(ekey, now, 'corrupt', id, 'lease member without task record removed')
    end
  end
end
if #requeued > 0 then
  notify_wake('reaped', requeued[1], now)
end
if #requeued + #dead > 0 then
  notify_dash('reaped', (requeued[1] or dead[1]), now)
end

-- housekeeping
local old = redis.call('ZRANGEBYSCORE', tpmin, '-inf', now - retention, 'LIMIT', 0, 200)
for _, m in ipairs(old) do
  redis.call('HDEL', tp, m .. ':completed', m .. ':failed', m .. ':polled', m .. ':ttr_sum', m .. ':ttr_count')
  redis.call('ZREM', tpmin, m)
end
local stale = redis.call('ZRANGEBYSCORE', resultsz, '-inf', now - ttl, 'LIMIT', 0, 200)
if #stale > 0 then
  redis.call('ZREM', resultsz, unpack(stale))
end
return { requeued, dead }
