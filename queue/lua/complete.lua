-- complete.lua: store final results and end the tasks, for one or many leases in one call, and
-- optionally lease the caller its next tasks in the same call (so a busy worker needs one
-- call per task and never a separate claim). Each item is refused (nothing written for it)
-- unless it carries the current lease token, so a worker whose lease was lost can never ack.
-- The result is one string key (prelude/records.lua `pack_result`), written over the result a
-- refresh replaces, with the result's whole life (fresh + stale + stale-if-error) as its TTL;
-- the record and any partial data go. The completion is shown in the task's history from the result itself, so
-- nothing is pushed there (except at the 'full' level); an existing history list expires with
-- the result.
-- Per completed task: HMGET, SET with PX, DEL (record + partial), PEXPIRE (history). Per call:
-- one ZADD (results index), one ZREM (lease), one XADD, the throughput counters (completed,
-- ttr_sum, and one HINCRBY per histogram bucket used: time to result 't', polls 'p', upstream
-- latency 'l'; a first write of a field also ZADDs it to the minutes index) and one
-- dashboard PUBLISH carrying every id; plus the claim when next_n > 0.
-- Undeclared keys: those of the claim-next part (claim.lua's header), read before any write.
-- KEYS: [claim] (prelude/claims.lua)
-- KEYS: results tp tpmin (the results index zset, the throughput hash and its minutes zset)
-- KEYS per item: task hist result partial (the task's record, history, result and partial data)
-- A success of the breaker's probe closes the breaker
-- (prelude/breaker.lua); the breaker is read with the claim, or alone when next_n = 0. A tenant's
-- completed task gives back its lease (fair_release).
-- ARGV[1..6] common   ARGV[7] result life ms (QueueConfig::result_life_ms)   ARGV[8] worker   ARGV[9] next_n   ARGV[10] lease_ms
-- ARGV[7+4i] id i   ARGV[8+4i] token i   ARGV[9+4i] result data i   ARGV[10+4i] latency_ms i
-- ARGV[11+4n .. 13+4n] the per-tenant limits (claim.lua)
-- Returns {{status_1, ..., status_n}, {claimed rows as claim.lua}}: status 1 = completed,
-- 0 = stale token (nothing written).
local FP = claim_limits(ARGV)
if FP == nil then return redis.error_reply('ERR repoll: bad per-tenant limits') end
local ttl = tonumber(ARGV[7])
local worker = ARGV[8]
local next_n = tonumber(ARGV[9])
local lease_ms = tonumber(ARGV[10])
local n = (#ARGV - 13) / 4
if ttl == nil or ttl < 1 or worker == nil or next_n == nil or next_n < 0 or lease_ms == nil
  or lease_ms < 1 or (next_n > 0 and worker == '') or n < 0 or n ~= math.floor(n)
  or item_count(KEYS, ITEM_KEYS) ~= n or n + next_n < 1 then
  return redis.error_reply('ERR repoll complete: bad arguments')
end
for i = 1, n do
  if ARGV[7 + 4 * i] == '' or tonumber(ARGV[8 + 4 * i]) == nil
    or tonumber(ARGV[10 + 4 * i]) == nil then
    return redis.error_reply('ERR repoll complete: bad item')
  end
end
local now = now_ms()
-- Reads: every item's record, then the claim.
local recs = {}
for i = 1, n do
  local tkey = item_keys(KEYS, ITEM_KEYS, i)
  recs[i] = redis.call('HMGET', tkey, 's', 'tk', 'q', 'c', 'p', 'w', 'tn', 'u', 'fp',
    'lp')
end
local plan, br = claim_next_read(K, FP, next_n, now)

local now_s = fmt(now)
local status = {}
local ids = {}
local index_args = {}
local ttr = 0
local hist_counts = {}
local who1 = nil
local one_worker = true
for i = 1, n do
  local f = recs[i]
  local token = ARGV[8 + 4 * i]
  if f[1] ~= 'leased' or f[2] ~= token then
    status[i] = 0
  else
    local id = ARGV[7 + 4 * i]
    local tkey, hkey, rkey, pkey = item_keys(KEYS, ITEM_KEYS, i)
    local created = num(f[4], now)
    local who = f[6] or ''
    local query = f[3] or ''
    local latency = ARGV[10 + 4 * i]
    -- The task's story goes into the result: the claim that completed it (`u` while leased),
    -- its first and last polls, its tenant (prelude/records.lua `pack_result`).
    redis.call('SET', rkey, pack_result(now, created, num(f[5], 0), token, latency, who, query,
      ARGV[9 + 4 * i], { claimed = f[8], first_poll = f[9], last_poll = f[10],
      tenant = f[7] or '' }), 'PX', ttl)
    redis.call('DEL', tkey, pkey)
    fair_release(K.fairc, f[7])
    hist_routine(hkey, now, 'completed', completed_detail(who, token, now - created, latency))
    -- History of a finished task lives as long as its result.
    redis.call('PEXPIRE', hkey, ttl)
    ids[#ids + 1] = id
    index_args[#index_args + 1] = now_s
    index_args[#index_args + 1] = id
    ttr = ttr + math.max(now - created, 0)
    tally(hist_counts, 't', now - created)
    tally(hist_counts, 'p', num(f[5], 0))
    tally(hist_counts, 'l', latency)
    if who1 == nil then
      who1 = who
    elseif who ~= who1 then
      one_worker = false
    end
    status[i] = 1
  end
end
local done = #ids
if done > 0 then
  redis.call('ZADD', K.results, unpack(index_args))
  redis.call('ZREM', K.lease, unpack(ids))
  if done == 1 then
    event(K.events, now, 'completed', ids[1], 'by ' .. who1)
  else
    event(K.events, now, 'completed', ids[1],
      fmt(done) .. ' tasks' .. (one_worker and (' by ' .. who1) or ''))
  end
  bump(K.tp, K.tpmin, now, 'completed', done)
  bump(K.tp, K.tpmin, now, 'ttr_sum', ttr)
  bump_tally(K.tp, K.tpmin, now, hist_counts)
  notify_dash_batch('completed', ids, now)
end
breaker_succeeded(K, br, ids, now)
return { status, claim_apply(K, plan, worker, lease_ms, now) }
