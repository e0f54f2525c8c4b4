-- fail.lua: the worker saw an error. Counts an attempt; the task goes back to due after the
-- backoff, or dead when attempts or the whole-life deadline are exhausted (or on mode 'dead').
-- Optionally leases the caller its next tasks in the same call. Errors are transitions: they
-- go to the history at the 'transitions' level. Counted per minute: 'failed' (each call),
-- 'dead' (a task that dies here), 'breaker_opened' (this error opened the breaker: the
-- dashboard's charts mark it), and the call's upstream latency in its histogram bucket 'l'.
-- The circuit breaker (prelude/breaker.lua): an error of mode 'after' is the upstream's (a timeout, a
-- refused connection, a 5xx, a 429, a bad body; 'dead' is the task's own: a permanent 4xx or
-- the upstream's "failed"). While the breaker is open or half-open such an error is not the
-- task's fault: no attempt is counted and the task waits ready for the breaker to close (a
-- failed probe opens it again for a cool-down). While it is closed the error is counted per
-- minute ('uerr'), and when the errors of the last minute (this one plus the previous one
-- weighted by what is left of it) reach ARGV[18] and ARGV[19] of the calls, it opens for
-- ARGV[20] ms.
-- The failed call in fields beside the message (record `es` HTTP status, `ed` the call's
-- duration, `eb` the start of the answer's body, at most BODY_MAX bytes), and the claim it
-- ended (`lc`, `lw`), all in the HSET that stores the message: no command more per failure.
-- Undeclared keys: those of the claim-next part (claim.lua's header), read before any write.
-- KEYS: [claim] (prelude/claims.lua)
-- KEYS: dead tp tpmin task hist (the dead zset, the throughput hash and its minutes zset, the
-- task's record and history). A tenant's failed task gives back its lease.
-- ARGV[1..6] common   ARGV[7] worker   ARGV[8] next_n   ARGV[9] lease_ms   ARGV[10] id
-- ARGV[11] token   ARGV[12] error (kept to ERROR_MAX bytes, prelude.lua)   ARGV[13] mode ('after'|'dead')   ARGV[14] delay_ms
-- ARGV[15] latency_ms (the call's duration)   ARGV[16] the answer's HTTP status (0 = none: no
-- answer, or not an HTTP error)   ARGV[17] the start of the answer's body ('' = none)
-- ARGV[18] breaker: errors a minute that open it (0 = never by itself)
-- ARGV[19] breaker: least error rate that opens it (0..1)   ARGV[20] breaker cool-down ms
-- ARGV[21..23] the per-tenant limits (claim.lua)
-- Returns {{'retry', due_at, attempts} | {'dead', reason} | {'stale'}, {claimed rows},
--   opened}: opened is the time (ms) until which this error opened the breaker, 0 when it did
--   not (the worker says so in the span of the call that opened it).
local FP = claim_limits(ARGV)
if FP == nil then return redis.error_reply('ERR repoll: bad per-tenant limits') end
local deadz = K.dead
local tp = K.tp
local tpmin = K.tpmin
local tkey = K.task
local hkey = K.hist
local worker = ARGV[7]
local next_n = tonumber(ARGV[8])
local lease_ms = tonumber(ARGV[9])
local id = ARGV[10]
local token = ARGV[11]
local err = ARGV[12]
local mode = ARGV[13]
local delay = tonumber(ARGV[14])
local latency = tonumber(ARGV[15])
local http_status = tonumber(ARGV[16])
local body = ARGV[17]
local b_fail = tonumber(ARGV[18])
local b_rate = tonumber(ARGV[19])
local b_cool = tonumber(ARGV[20])
if b_fail == nil or b_fail < 0 or b_rate == nil or b_rate < 0 or b_rate > 1 or b_cool == nil
  or b_cool < 1 then
  return redis.error_reply('ERR repoll fail: bad breaker arguments')
end
if worker == nil or next_n == nil or next_n < 0 or lease_ms == nil or lease_ms < 1
  or (next_n > 0 and worker == '') or #ARGV ~= 23 or id == nil or id == ''
  or tonumber(token) == nil or err == nil or (mode ~= 'after' and mode ~= 'dead')
  or delay == nil or delay < 0 or latency == nil or http_status == nil or http_status < 0
  or http_status > 999 or body == nil then
  return redis.error_reply('ERR repoll fail: bad arguments')
end
-- The error goes to the record, the history, the event stream and the breaker: bounded here
-- whatever the caller sent.
err = cut(err, ERROR_MAX)
body = cut(body, BODY_MAX)
local now = now_ms()
local f = redis.call('HMGET', tkey, 's', 'tk', 'a', 'm', 'dl', 'pr', 'w', 'u', 'tn', 'rf')
-- The fields stored with the message (all of them each time, so no earlier call's status or
-- body is left beside this error).
local function failure(extra)
  local t = { 'e', err, 'es', http_status > 0 and fmt(http_status) or '', 'ed', fmt(latency),
    'eb', body, 'lc', f[8] or fmt(now), 'lw', f[7] or '' }
  for i = 1, #extra do t[#t + 1] = extra[i] end
  return t
end
local plan, br = claim_next_read(K, FP, next_n, now)
if f[1] ~= 'leased' or f[2] ~= token then
  return { { 'stale' }, claim_apply(K, plan, worker, lease_ms, now), 0 }
end
local opened = 0
if mode == 'after' and br then
  -- The breaker is open or half-open: a call made before it opened, or the probe.
  if br.st == 'half' and br.probe == id then
    local to = now + b_cool
    redis.call('HSET', K.breaker, 'st', 'open', 'since', fmt(now), 'to', fmt(to), 'probe', '',
      'pd', '0', 'why', err, 'by', 'auto')
    event(K.events, now, 'breaker', id, 'probe failed: open until ' .. fmt(to))
    breaker_notice('breaker_open', now)
    opened = to
  end
  redis.call('ZREM', K.lease, id)
  fair_release(K.fairc, f[9])
  bump(tp, tpmin, now, 'failed', 1)
  hist_claim(hkey, num(f[8], now), 'by ' .. (f[7] or '?') .. ' token ' .. token)
  -- Ready again (claimed when the breaker lets calls through), its attempts unchanged.
  local attempts = num(f[3], 0)
  to_due(tkey, K.ready, K.ready_bg, K.due, K.retry, id, f[6], now, attempts, now, failure({}))
  hist(hkey, now, 'error', err .. ' -> breaker open: not counted, waits for the breaker')
  event(K.events, now, 'failed', id, err)
  notify_dash('failed', id, now)
  return { { 'retry', now, attempts }, claim_apply(K, plan, worker, lease_ms, now), opened }
end
local attempts = num(f[3], 0) + 1
local max_attempts = num(f[4], 0)
local deadline = num(f[5], 0)
bump(tp, tpmin, now, 'failed', 1)
if mode == 'after' and b_fail > 0 then
  -- The breaker is closed: count the upstream's error and open it past the threshold.
  bump(tp, tpmin, now, 'uerr', 1)
  local minute = now - (now % 60000)
  local cur, prev = fmt(minute), fmt(minute - 60000)
  local w = 1 - (now - minute) / 60000
  local v = redis.call('HMGET', tp, cur .. ':uerr', cur .. ':completed', cur .. ':polled',
    cur .. ':failed', prev .. ':uerr', prev .. ':completed', prev .. ':polled', prev .. ':failed')
  local errs = num(v[1], 0) + w * num(v[5], 0)
  local calls = num(v[2], 0) + num(v[3], 0) + num(v[4], 0)
    + w * (num(v[6], 0) + num(v[7], 0) + num(v[8], 0))
  if errs >= b_fail and errs >= b_rate * calls then
    local to = now + b_cool
    redis.call('HSET', K.breaker, 'st', 'open', 'since', fmt(now), 'to', fmt(to), 'why', err,
      'by', 'auto')
    event(K.events, now, 'breaker', id, string.format('open: %d of %d calls failed in the last '
      .. 'minute; until %s', math.floor(errs + 0.5), math.floor(calls + 0.5), fmt(to)))
    breaker_notice('breaker_open', now)
    bump(tp, tpmin, now, 'breaker_opened', 1)
    opened = to
  end
end
local lat = {}
tally(lat, 'l', latency)
bump_tally(tp, tpmin, now, lat)
redis.call('ZREM', K.lease, id)
fair_release(K.fairc, f[9])
local reason = nil
if mode == 'dead' then
  reason = 'fatal'
elseif max_attempts > 0 and attempts >= max_attempts then
  reason = 'max_attempts'
elseif deadline > 0 and now + delay > deadline then
  reason = 'deadline'
end
-- The claim this error ends, then the error (the claim itself wrote no history).
hist_claim(hkey, num(f[8], now), 'by ' .. (f[7] or '?') .. ' token ' .. token)
local out
if reason then
  redis.call('HSET', tkey, unpack(failure({ 'a', fmt(attempts) })))
  hist(hkey, now, 'error', err)
  to_dead(tkey, hkey, K.events, deadz, id, now, reason,
    'after ' .. fmt(attempts) .. (attempts == 1 and ' attempt' or ' attempts'))
  bump(tp, tpmin, now, 'dead', 1)
  -- A refresh's death: its stored result is answered stale-if-error (enqueue.lua).
  if f[10] then bump(tp, tpmin, now, 'refresh_failed', 1) end
  notify_dash('dead', id, now)
  out = { 'dead', reason }
else
  local due_at = now + delay
  to_due(tkey, K.ready, K.ready_bg, K.due, K.retry, id, f[6], due_at, attempts, now,
    failure({ 'a', fmt(attempts) }))
  hist(hkey, now, 'error', err .. ' -> retry at ' .. fmt(due_at) .. ' (attempt '
    .. fmt(attempts) .. ')')
  event(K.events, now, 'failed', id, err)
  notify_dash('failed', id, now)
  if delay == 0 then wake_workers(K.wakeups, 1) end
  out = { 'retry', due_at, attempts }
end
return { out, claim_apply(K, plan, worker, lease_ms, now), opened }
