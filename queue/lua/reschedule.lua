-- reschedule.lua: "still processing, poll again later", for one or many leases, optionally
-- leasing the caller its next tasks in the same call. Counts a poll, never an attempt. A next
-- poll beyond the whole-life deadline makes the task dead with reason 'deadline'. Partial data
-- goes to its own string key (a long value in the record would turn the whole hash from the
-- compact listpack encoding into a hashtable). Polls go to the history at the 'full' level only;
-- at every level the record counts them (`p`) and keeps the first and last poll's times (`fp`,
-- `lp`) and the claim the poll ended (`lc`, `lw`), written by the HSET the poll makes anyway.
-- Counted per minute: 'polled', each call's upstream latency in its histogram bucket 'l',
-- 'dead' for a task ended by the deadline, and 'refresh_failed' if it was a refresh (`rf`).
-- Undeclared keys: those of the claim-next part (claim.lua's header), read before any write.
-- KEYS: [claim] (prelude/claims.lua)
-- KEYS: dead tp tpmin (the dead zset, the throughput hash and its minutes zset)
-- KEYS per item: task hist partial (the task's record, history and partial data)
-- A poll of the breaker's probe is a success: it closes the
-- breaker (prelude/breaker.lua). A tenant's polled task gives back its lease (fair_release).
-- A job API's submit stores its job (`j`, at most 2048 bytes) in the HSET the poll makes anyway,
-- under the same token check, unless the record has one (one job per life of a task), and
-- says so in the history ('submitted').
-- ARGV[1..6] common   ARGV[7] worker   ARGV[8] next_n   ARGV[9] lease_ms
-- ARGV[3+7i] id i   ARGV[4+7i] token i   ARGV[5+7i] delay_ms i   ARGV[6+7i] has_partial (0/1) i
-- ARGV[7+7i] partial i   ARGV[8+7i] latency_ms i   ARGV[9+7i] job i ('' = none)
-- ARGV[10+7n .. 12+7n] the per-tenant limits (claim.lua)
-- Returns {{tag_1, value_1, ..., tag_n, value_n}, {claimed rows as claim.lua}} where tag/value
-- is 'ok'/due_at | 'dead'/'deadline' | 'stale'/0.
local FP = claim_limits(ARGV)
if FP == nil then return redis.error_reply('ERR repoll: bad per-tenant limits') end
local deadz = K.dead
local tp = K.tp
local tpmin = K.tpmin
local worker = ARGV[7]
local next_n = tonumber(ARGV[8])
local lease_ms = tonumber(ARGV[9])
local n = (#ARGV - 12) / 7
if worker == nil or next_n == nil or next_n < 0 or lease_ms == nil or lease_ms < 1
  or (next_n > 0 and worker == '') or n < 0 or n ~= math.floor(n)
  or item_count(KEYS, ITEM_KEYS) ~= n
  or n + next_n < 1 then
  return redis.error_reply('ERR repoll reschedule: bad arguments')
end
for i = 1, n do
  local delay = tonumber(ARGV[5 + 7 * i])
  local hp = ARGV[6 + 7 * i]
  if ARGV[3 + 7 * i] == '' or tonumber(ARGV[4 + 7 * i]) == nil or delay == nil or delay < 0
    or (hp ~= '0' and hp ~= '1') or tonumber(ARGV[8 + 7 * i]) == nil
    or #ARGV[9 + 7 * i] > 2048 then
    return redis.error_reply('ERR repoll reschedule: bad item')
  end
end
local now = now_ms()
local recs = {}
for i = 1, n do
  local tkey = item_keys(KEYS, ITEM_KEYS, i)
  recs[i] = redis.call('HMGET', tkey, 's', 'tk', 'p', 'a', 'dl', 'pr', 'w', 'tn',
    'rf', 'u', 'fp', 'j')
end
local plan, br = claim_next_read(K, FP, next_n, now)

local out = {}
local moved = {}
local dead = {}
local seen = {}
local woke = 0
local lat = {}
local refreshes_failed = 0
for i = 1, n do
  local f = recs[i]
  local id, token = ARGV[3 + 7 * i], ARGV[4 + 7 * i]
  if f[1] ~= 'leased' or f[2] ~= token then
    out[#out + 1] = 'stale'
    out[#out + 1] = 0
  else
    local tkey, hkey, pkey = item_keys(KEYS, ITEM_KEYS, i)
    local delay = tonumber(ARGV[5 + 7 * i])
    local polls = num(f[3], 0) + 1
    local attempts = num(f[4], 0)
    local deadline = num(f[5], 0)
    local due_at = now + delay
    -- The poll's story, in the HSET this poll writes anyway (no command more per poll): the
    -- count, the first and last answer's times, and the claim it ends (its time, `u` while
    -- leased, and worker), so every history level can sum the polls up (read/detail.rs).
    local story = { 'p', fmt(polls), 'lp', fmt(now), 'lc', f[10] or fmt(now), 'lw', f[7] or '' }
    if not f[11] then
      story[#story + 1] = 'fp'
      story[#story + 1] = fmt(now)
    end
    local job = ARGV[9 + 7 * i]
    if job ~= '' and not f[12] then
      story[#story + 1] = 'j'
      story[#story + 1] = job
      -- Shown without a URL's query string or fragment: a presigned URL's credential.
      hist(hkey, now, 'submitted', 'upstream job ' .. string.match(job, '^[^?#]*'))
    end
    tally(lat, 'l', ARGV[8 + 7 * i])
    seen[#seen + 1] = id
    redis.call('ZREM', K.lease, id)
    fair_release(K.fairc, f[8])
    if ARGV[6 + 7 * i] == '1' then redis.call('SET', pkey, ARGV[7 + 7 * i]) end
    if deadline > 0 and due_at > deadline then
      redis.call('HSET', tkey, unpack(story))
      to_dead(tkey, hkey, K.events, deadz, id, now, 'deadline', 'next poll after the deadline')
      dead[#dead + 1] = id
      -- A refresh's death, as fail.lua counts one (its result is answered stale-if-error).
      if f[9] then refreshes_failed = refreshes_failed + 1 end
      out[#out + 1] = 'dead'
      out[#out + 1] = 'deadline'
    else
      to_due(tkey, K.ready, K.ready_bg, K.due, K.retry, id, f[6], due_at, attempts, now, story)
      hist_routine(hkey, now, 'polled', 'still processing (poll ' .. fmt(polls) .. ', '
        .. ARGV[8 + 7 * i] .. ' ms), next poll at ' .. fmt(due_at))
      moved[#moved + 1] = id
      if delay == 0 then woke = woke + 1 end
      out[#out + 1] = 'ok'
      out[#out + 1] = due_at
    end
  end
end
if #moved + #dead > 0 then
  bump(tp, tpmin, now, 'polled', #moved + #dead)
  bump_tally(tp, tpmin, now, lat)
end
if #dead > 0 then bump(tp, tpmin, now, 'dead', #dead) end
if refreshes_failed > 0 then bump(tp, tpmin, now, 'refresh_failed', refreshes_failed) end
notify_dash_batch('rescheduled', moved, now)
notify_dash_batch('dead', dead, now)
wake_workers(K.wakeups, woke)
breaker_succeeded(K, br, seen, now)
return { out, claim_apply(K, plan, worker, lease_ms, now) }
