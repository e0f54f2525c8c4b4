-- reap.lua: phase two of reap, plus bounded housekeeping. Each candidate is re-validated: its
-- lease must still carry the deadline seen by the peek (so it was neither renewed nor
-- re-claimed meanwhile — a new claim or renew always moves the deadline) and be past it.
-- Expired leases go back to ready now, or to dead as 'poison' after max_lease_losses losses
-- (or 'deadline' when the whole-life deadline has passed). A lost lease is a transition: it
-- goes to the history, with the claim it ends.
-- Housekeeping, at most 200 entries of each kind per call: per-minute throughput counters
-- older than the retention (a day) are rolled up into per-hour counters (same field names,
-- "<hour_ms>:<field>"; a minute's counts are in one place or the other, never both, so a reader
-- summing both is exact) and removed; hourly counters older than the hourly retention (a week)
-- are removed; result-index members older than the result TTL are removed.
-- KEYS: ready ready_bg due lease retry dead events tp tpmin results tphour tphourix wakeups fairc
-- KEYS per item: task hist
-- ARGV[1..6] common   ARGV[7] max_lease_losses (0 = never poison)   ARGV[8] throughput retention ms
-- ARGV[9] result_ttl_ms   ARGV[10] hourly throughput retention ms
-- ARGV[9+2i] id i   ARGV[10+2i] peeked deadline i
-- Returns {{requeued ids}, {dead ids}}
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local leasez = K.lease
local retryz = K.retry
local deadz = K.dead
local ekey = K.events
local tp = K.tp
local tpmin = K.tpmin
local resultsz = K.results
local tph = K.tphour
local tphix = K.tphourix
local max_losses = tonumber(ARGV[7])
local retention = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local hour_retention = tonumber(ARGV[10])
local fairc = K.fairc
local n = (#ARGV - 10) / 2
if max_losses == nil or retention == nil or ttl == nil or hour_retention == nil
  or hour_retention < retention or n ~= math.floor(n) or n < 0
  or item_count(KEYS, ITEM_KEYS) ~= n then
  return redis.error_reply('ERR repoll reap: bad arguments')
end
local now = now_ms()
local requeued = {}
local dead = {}
for i = 1, n do
  local id = ARGV[9 + 2 * i]
  local seen = ARGV[10 + 2 * i]
  local tkey, hkey = item_keys(KEYS, ITEM_KEYS, i)
  local score = redis.call('ZSCORE', leasez, id)
  if score and tonumber(score) == tonumber(seen) and tonumber(score) <= now then
    local f = redis.call('HMGET', tkey, 's', 'w', 'tk', 'll', 'a', 'dl', 'pr', 'u', 'tn', 'rf')
    if f[1] == 'leased' then
      local losses = num(f[4], 0) + 1
      local deadline = num(f[6], 0)
      redis.call('ZREM', leasez, id)
      fair_release(fairc, f[9])
      redis.call('HSET', tkey, 'll', fmt(losses))
      hist_claim(hkey, num(f[8], now), 'by ' .. (f[2] or '?') .. ' token ' .. (f[3] or '?'))
      hist(hkey, now, 'lease_expired', 'from ' .. (f[2] or '?') .. ' token ' .. (f[3] or '?'))
      if max_losses > 0 and losses >= max_losses then
        to_dead(tkey, hkey, ekey, deadz, id, now, 'poison', fmt(losses) .. ' lease losses')
        dead[#dead + 1] = id
        bump(tp, tpmin, now, 'dead', 1)
        -- A refresh's death, as in fail.lua.
        if f[10] then bump(tp, tpmin, now, 'refresh_failed', 1) end
      elseif deadline > 0 and now > deadline then
        to_dead(tkey, hkey, ekey, deadz, id, now, 'deadline', 'lease expired after the deadline')
        dead[#dead + 1] = id
        bump(tp, tpmin, now, 'dead', 1)
        if f[10] then bump(tp, tpmin, now, 'refresh_failed', 1) end
      else
        to_due(tkey, readyk, bgk, duez, retryz, id, f[7], now, num(f[5], 0), now)
        event(ekey, now, 'lease_expired', id, 'from ' .. (f[2] or '?'))
        requeued[#requeued + 1] = id
      end
    elseif f[1] == false then
      redis.call('ZREM', leasez, id)
      event(ekey, now, 'corrupt', id, 'lease member without task record removed')
    end
  end
end
wake_workers(K.wakeups, #requeued)
local all = {}
for _, id in ipairs(requeued) do all[#all + 1] = id end
for _, id in ipairs(dead) do all[#all + 1] = id end
notify_dash_batch('reaped', all, now)

-- housekeeping
-- Every per-minute counter any script bumps (prelude/counters.lua, bump): the answers by
-- freshness and the refreshes come from enqueue.lua and fail.lua. A counter missing here would
-- be deleted after a day without being rolled up (and a week's view would miss it).
local COUNTERS = { 'completed', 'failed', 'polled', 'ttr_sum', 'uerr', 'fresh', 'stale', 'miss',
  'negative', 'ahead', 'refresh_failed', 'dead' }
local function counter_fields(at)
  local fields = {}
  for j, c in ipairs(COUNTERS) do fields[j] = at .. ':' .. c end
  return fields
end
local old = redis.call('ZRANGEBYSCORE', tpmin, '-inf', now - retention, 'LIMIT', 0, 200)
for _, m in ipairs(old) do
  local minute = tonumber(string.match(m, '^(%d+)'))
  local hour = minute and (minute - (minute % 3600000))
  local hour_s = hour and fmt(hour)
  if minute == nil then
    -- Not written by a script (no leading minute): nothing to roll up.
    redis.call('HDEL', tp, m)
  elseif string.find(m, ':', 1, true) then
    -- A histogram bucket's field, indexed by its own name (prelude/counters.lua, bump_tally).
    local v = tonumber(redis.call('HGET', tp, m))
    if v and v > 0 then
      local field = hour_s .. string.sub(m, #string.match(m, '^%d+') + 1)
      redis.call('HINCRBY', tph, field, v)
      redis.call('ZADD', tphix, hour, field)
    end
    redis.call('HDEL', tp, m)
  else
    local fields = counter_fields(m)
    local vals = redis.call('HMGET', tp, unpack(fields))
    for j, c in ipairs(COUNTERS) do
      local v = tonumber(vals[j])
      if v and v > 0 then
        redis.call('HINCRBY', tph, hour_s .. ':' .. c, v)
        redis.call('ZADD', tphix, hour, hour_s)
      end
    end
    -- ttr_count: written by older versions (every completion counts now).
    fields[#fields + 1] = m .. ':ttr_count'
    redis.call('HDEL', tp, unpack(fields))
  end
  redis.call('ZREM', tpmin, m)
end
local old_hours = redis.call('ZRANGEBYSCORE', tphix, '-inf', now - hour_retention, 'LIMIT', 0,
  200)
for _, h in ipairs(old_hours) do
  if string.find(h, ':', 1, true) then
    redis.call('HDEL', tph, h)
  else
    redis.call('HDEL', tph, unpack(counter_fields(h)))
  end
  redis.call('ZREM', tphix, h)
end
local stale = redis.call('ZRANGEBYSCORE', resultsz, '-inf', now - ttl, 'LIMIT', 0, 200)
if #stale > 0 then
  redis.call('ZREM', resultsz, unpack(stale))
end
return { requeued, dead }
