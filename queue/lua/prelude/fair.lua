-- prelude/fair.lua: fair shares between tenants (used by the claims).

-- ---------------------------------------------------------------------------------------------
-- Fair shares between tenants (ARCHITECTURE.md, "Fair shares"). An interactive task that
-- carries a tenant (record field `tn`: who asked) waits ready in the fair zset K.fair, not in
-- the ready list, as member "<tenant>|<id>" scored by a start tag (start-time fair queuing): an
-- arrival of tenant T gets max(V, last[T]) + 1, where V (K.fairv) is the largest tag claimed so
-- far and last[T] (K.fairt, a zset tenant -> tag) is T's latest tag. A tenant with 5,000 tasks
-- holds tags V+1 .. V+5000; one arriving later with 20 gets V'+1 .. V'+20, interleaved with
-- them; claims go in tag order, so they alternate between the tenants with ready work however
-- long one tenant's backlog is. The untenanted interactive work (due zset, then ready list) is
-- one more lane, tenant '' in K.fairt, that takes its turn the same way; it costs nothing while
-- no tenant has ready work. K.fairt forgets tenants whose last tag V has passed (for them
-- max(V, last) = V anyway), so it holds only tenants with a backlog.
-- A tenant's task made ready again (a retry, a poll due now, a lost lease) passes through the
-- due zset (to_due): a claim moves the due-now tenant members it reads into the fair zset
-- ("promotes" them) with a fresh tag; while the fair zset is in use a claim reads FAIR_PROMOTE
-- more due-now members than it claims, so promotion outruns claims and a poll's place is fair.
-- Per-tenant limits of the queue (one upstream), the claiming script's last three ARGV: at most
-- `cap` leases at once (K.fairc: tenant -> leases held, counted by claims and lease ends,
-- recounted from the lease zset by fair_sync.lua), at most `rate` claims a second with a
-- `burst` (K.fairr: tenant -> GCRA theoretical arrival time). A tenant over a limit is skipped
-- and its tasks keep their places. A claim reads the fair zset's head (tags below V: tenants
-- that were skipped at a limit) and its front (tags from V), FAIR_WINDOW + max_n of each.
local FAIR_PROMOTE = 64
local FAIR_WINDOW = 32

-- The per-tenant limits from a claiming script's last three ARGV (cap: leases at once, 0 = no
-- cap; rate: claims a second, 0 = none; burst >= 1). nil when malformed.
local function fair_policy(cap, rate, burst)
  cap = tonumber(cap)
  rate = tonumber(rate)
  burst = tonumber(burst)
  if cap == nil or cap < 0 or rate == nil or rate < 0 or burst == nil or burst < 1 then
    return nil
  end
  local interval = 0
  if rate > 0 then interval = 1000 / rate end
  return { cap = cap, interval = interval, burst = burst }
end

-- The fair zset member of a tenant's task, and back (tenant names never hold '|').
local function fair_member(tn, id)
  return tn .. '|' .. id
end

local function fair_split(m)
  local bar = string.find(m, '|', 1, true)
  if not bar then return '', m end
  return string.sub(m, 1, bar - 1), string.sub(m, bar + 1)
end

-- The start tag of a new arrival of tenant `tn` (reads only; the caller ZADDs it to fairt).
local function fair_tag(fairt, fairv, tn)
  local v = num(redis.call('GET', fairv), 0)
  return math.max(v, num(redis.call('ZSCORE', fairt, tn), 0)) + 1
end

-- A tenant's lease ended (completed, polled, failed, expired, released, cancelled).
local function fair_release(fairc, tn)
  if tn and tn ~= '' and redis.call('HINCRBY', fairc, tn, -1) <= 0 then
    redis.call('HDEL', fairc, tn)
  end
end

