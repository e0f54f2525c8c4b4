-- claim.lua: lease up to max_n ready tasks to a worker in one call (see claim_read in the
-- prelude for the order and the background share). Each claimed task gets a fresh fencing
-- token (take_tokens in the prelude: increasing, and above Redis time * 1024, so a failover
-- that lost the last claims cannot hand a token out twice). Empty while paused, or while the
-- breaker is open (after its cool-down: one task, the probe; see the prelude).
-- Undeclared keys (derived from ARGV[6], same hash tag): the task hashes {q}:t:<id> of the ids
-- it finds in the ready lists and the due zset ('full' history level: also {q}:h:<id>, created
-- last). All reads happen before the first write.
-- KEYS: [claim] (prelude/claims.lua: the ready lists, the due, retry and lease zsets, the
-- token and share counters, the paused flag, the events stream, the fair-share keys of
-- prelude/fair.lua, the breaker hash and the wake-up list)
-- ARGV[1..6] common   ARGV[7] worker   ARGV[8] max_n   ARGV[9] lease_ms
-- ARGV[10] woken: 1 if the caller's BLPOP took a wake-up entry for this claim, else 0
-- ARGV[11] per-tenant lease cap   ARGV[12] per-tenant claims a second   ARGV[13] per-tenant
-- burst (the last three ARGV of every claiming script; 0 = no limit)
-- Returns {{id, query, payload, token, attempts, polls, max_attempts, created, deadline,
--           lease_deadline, refresh (1/0), trace context ('' = none), joiners' contexts
--           (space-separated, '' = none), tenant ('' = none)}, ...}
local FP = claim_limits(ARGV)
local worker = ARGV[7]
local max_n = tonumber(ARGV[8])
local lease_ms = tonumber(ARGV[9])
local woken = tonumber(ARGV[10])
if worker == nil or worker == '' or max_n == nil or max_n < 1 or lease_ms == nil
  or lease_ms < 1 or (woken ~= 0 and woken ~= 1) or #ARGV ~= 13 or FP == nil then
  return redis.error_reply('ERR repoll claim: bad arguments')
end
local now = now_ms()
return claim_apply(K, claim_read(K, FP, max_n, now), worker, lease_ms, now, woken)
