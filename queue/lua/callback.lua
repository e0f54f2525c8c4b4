-- callback.lua: the upstream called back with its final answer and the task ends at once,
-- whatever it was doing (waiting due, waiting in a ready list, or leased to a worker whose
-- call is still out). The answer is 'done' (store the result, as complete.lua) or 'failed'
-- (the upstream gave up: dead at once, the verdict fail.lua gives a poll that read "failed":
-- reason 'fatal', the upstream's message as the last error, counted 'failed' and 'dead'), or,
-- for a provider's webhook that only says "look now", 'look': a task waiting for a later poll
-- is made due now (and a worker woken); a leased one is being polled already. The callback
-- names one life of the task (its creation time), so a token of an earlier life, or one
-- replayed after this end, finds nothing; a token past its expiry (Redis time) changes
-- nothing either. A webhook also names its job: a task holding another job (a refresh made
-- a new one) is left alone; and its webhook id, remembered here once the change is made, so a
-- replay changes nothing. A worker still holding the lease loses it here: its own write later
-- finds no record or a dead one (NotFound / stale) and writes nothing, the same fence as for
-- a cancel. A result has complete.lua's format; its worker is "callback" and its token the
-- lease token the task had (0 if it was not leased). A failure is no attempt of ours:
-- attempts stay. Validates every argument and reads the record before any write.
-- KEYS: task hist result partial ready ready_bg due lease retry results tp tpmin events fair fairc dead
-- KEYS: wakeups <seen> (the webhook id's memory; unused without one)
-- ARGV[1..6] common   ARGV[7] id   ARGV[8] created ms (the task's life)   ARGV[9] expires ms
-- (0 = never)   ARGV[10] outcome ('done' | 'failed' | 'look')   ARGV[11] the result data
-- (done) or the upstream's message (failed) or '' (look)   ARGV[12] result life ms
-- ARGV[13] the job the task must hold ('' = not checked)   ARGV[14] webhook id ('' = none)
-- ARGV[15] how long a webhook id is remembered, ms
-- Returns 1 if the task was ended (or, 'look', made due now), 0 if no live task of that life
-- exists (or it expired), 2 if the webhook id was seen before, 3 if the task holds another
-- job. Nothing is written but for 1.
local tkey = K.task
local hkey = K.hist
local rkey = K.result
local pkey = K.partial
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local leasez = K.lease
local retryz = K.retry
local resultsz = K.results
local tp = K.tp
local tpmin = K.tpmin
local ekey = K.events
local fairz = K.fair
local fairc = K.fairc
local deadz = K.dead
local id = ARGV[7]
local created = tonumber(ARGV[8])
local expires = tonumber(ARGV[9])
local outcome = ARGV[10]
local text = ARGV[11]
local ttl = tonumber(ARGV[12])
local job = ARGV[13]
local hook = ARGV[14]
local memory = tonumber(ARGV[15])
if #ARGV ~= 15 or id == nil or id == '' or created == nil or expires == nil
  or (outcome ~= 'done' and outcome ~= 'failed' and outcome ~= 'look') or text == nil
  or ttl == nil or ttl < 1 or memory == nil or memory < 1 then
  return redis.error_reply('ERR repoll callback: bad arguments')
end
local now = now_ms()
if expires > 0 and now > expires then
  return 0
end
if hook ~= '' and redis.call('EXISTS', K.seen) == 1 then
  return 2
end
local f = redis.call('HMGET', tkey, 's', 'c', 'pr', 'tk', 'q', 'p', 'tn', 'u', 'w', 'rf', 'fp',
  'lp', 'j')
local state = f[1]
if (state ~= 'due' and state ~= 'leased') or num(f[2], -1) ~= created then
  return 0
end
if job ~= '' and f[13] ~= job then
  return 3
end
-- The webhook id, kept once its change is made (a replay then changes nothing).
if hook ~= '' then
  redis.call('SET', K.seen, '1', 'PX', memory)
end
if outcome == 'look' then
  local at = tonumber(redis.call('ZSCORE', duez, id))
  if state == 'due' and at and at > now then
    redis.call('ZADD', duez, now, id)
    if redis.call('ZSCORE', retryz, id) then redis.call('ZADD', retryz, now, id) end
    wake_workers(K.wakeups, 1)
  end
  hist(hkey, now, 'webhook', 'look now (was ' .. state .. ')')
  return 1
end
local token = f[4] or '0'
if state == 'due' then
  unqueue(readyk, bgk, duez, retryz, id, f[3], fairz, f[7])
  token = '0'
else
  redis.call('ZREM', leasez, id)
  fair_release(fairc, f[7])
end
if outcome == 'failed' then
  -- As fail.lua ends a lease with an error: the claim this ends (at the 'transitions' level
  -- the claim itself wrote no history), the error, then the death. The record, its partial
  -- data and its history stay, as for any dead task, for an operator to read or retry.
  if state == 'leased' then
    hist_claim(hkey, num(f[8], now), 'by ' .. (f[9] or '?') .. ' token ' .. token)
  end
  -- The upstream's verdict, not a failed call: no status, duration or body of one.
  redis.call('HSET', tkey, 'e', text, 'es', '', 'ed', '', 'eb', '')
  hist(hkey, now, 'error', text)
  to_dead(tkey, hkey, ekey, deadz, id, now, 'fatal', 'by callback (was ' .. state .. ')')
  bump(tp, tpmin, now, 'failed', 1)
  bump(tp, tpmin, now, 'dead', 1)
  -- A refresh's death, as in fail.lua.
  if f[10] then bump(tp, tpmin, now, 'refresh_failed', 1) end
  notify_dash('dead', id, now)
  return 1
end
local who = 'callback'
local query = f[5] or ''
local polls = num(f[6], 0)
redis.call('SET', rkey, pack_result(now, created, polls, token, '0', who, query, text,
  { claimed = state == 'leased' and f[8] or 0, first_poll = f[11], last_poll = f[12],
    tenant = f[7] or '' }), 'PX', ttl)
redis.call('DEL', tkey, pkey)
hist_routine(hkey, now, 'completed', 'by callback (was ' .. state .. ')')
redis.call('PEXPIRE', hkey, ttl)
redis.call('ZADD', resultsz, now, id)
event(ekey, now, 'completed', id, 'by callback')
bump(tp, tpmin, now, 'completed', 1)
bump(tp, tpmin, now, 'ttr_sum', math.max(now - created, 0))
local counts = {}
tally(counts, 't', now - created)
tally(counts, 'p', polls)
bump_tally(tp, tpmin, now, counts)
notify_dash('completed', id, now)
return 1
