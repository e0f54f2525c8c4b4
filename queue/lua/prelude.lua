-- prelude.lua: shared helpers, at the top of the one Lua library (scripts.rs builds it; Redis
-- has no `require`). Every function but
-- login_attempt receives the same six leading ARGV so these helpers need no per-call wiring:
--   ARGV[1] history_cap   ARGV[2] events_cap   ARGV[3] dashboard channel
--   ARGV[4] history level ('full' | 'transitions' | 'off')   ARGV[5] wake-up token cap
--   ARGV[6] per-task key prefix ('{name}:'), used only by the scripts whose header says so
-- Script-specific ARGV start at ARGV[7].
--
-- Keys: every key a script touches is in KEYS, except where a header says "undeclared": claims
-- (claim.lua and the claim-next part of complete / reschedule / fail), stats and the queued purge
-- find their task ids in a list or zset inside the script, so they derive the record key from
-- the prefix (PREFIX .. 't:' .. id). Those keys share the queue's hash tag, so Redis Cluster
-- serves them from the same slot; and because a slot migration can refuse an undeclared key
-- part-way, every such script reads all it needs before its first write and creates no
-- undeclared key (it only updates records it has just read).
--
-- Record layout (ARCHITECTURE.md has the table): a compact hash with short field names, and
-- a field is written only when it differs from its default, so the hash stays small and
-- listpack-encoded:
--   q query   s state (due | leased | dead)   c created   u last state change (omitted = c)
--   pr priority ('bg'; omitted = interactive)   a attempts   p polls   m max_attempts
--   dl whole-life deadline   tk token   w worker   ld lease deadline   e last error
--   dr dead reason   ll lease losses   pl payload   tn tenant (who asked; omitted = none)
--   (omitted numbers are 0, strings empty)
-- The common ARGV of the call being served. The library's helpers are built once when it loads
-- (not per call), so these are upvalues that read_common() sets at the start of every call:
-- Redis runs one call at a time, and each call sets all six before any helper reads them.
local HIST_CAP, EVENTS_CAP, CH_DASH, HIST_LEVEL, WAKE_CAP, PREFIX

-- read_common(ARGV): reads and checks ARGV[1..6]. Returns an error reply when they are bad
-- (the call must return it before writing anything), nil otherwise.
local function read_common(ARGV)
  HIST_CAP = tonumber(ARGV[1])
  EVENTS_CAP = tonumber(ARGV[2])
  CH_DASH = ARGV[3]
  HIST_LEVEL = ARGV[4]
  WAKE_CAP = tonumber(ARGV[5])
  PREFIX = ARGV[6]
  if not HIST_CAP or HIST_CAP < 1 or not EVENTS_CAP or EVENTS_CAP < 1 or CH_DASH == nil
    or (HIST_LEVEL ~= 'full' and HIST_LEVEL ~= 'transitions' and HIST_LEVEL ~= 'off')
    or not WAKE_CAP or WAKE_CAP < 1 or PREFIX == nil or PREFIX == '' then
    return redis.error_reply('ERR repoll: bad common ARGV')
  end
  return nil
end

-- Milliseconds from the Redis clock, so every client agrees on "now".
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as plain decimal strings (Lua's tostring could switch to exponent notation).
local function fmt(n)
  return string.format('%d', n)
end

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end

-- Per-task capped history: "at|kind|detail". Only what cannot be derived is stored: the
-- enqueue, the live lease and the completion are shown from the record and the result
-- (read.rs), so a task that goes enqueue -> polls -> done writes no history at all in the
-- default level. hist() is for transitions an operator needs later (errors, lease losses,
-- deaths, admin actions): written in 'full' and 'transitions'. hist_routine() is for claims and
-- polls: 'full' only. LTRIM only when over the cap (LPUSH returns the length).
local function push_hist(hkey, at, kind, detail)
  local len = redis.call('LPUSH', hkey, fmt(at) .. '|' .. kind .. '|' .. detail)
  if len > HIST_CAP then
    redis.call('LTRIM', hkey, 0, HIST_CAP - 1)
  end
end

local function hist(hkey, at, kind, detail)
  if HIST_LEVEL ~= 'off' then push_hist(hkey, at, kind, detail) end
end

local function hist_routine(hkey, at, kind, detail)
  if HIST_LEVEL == 'full' then push_hist(hkey, at, kind, detail) end
end

-- The entry of a claim that ends in a transition (error, release, lost lease), written when
-- the lease ends: at the 'transitions' level the claim itself writes nothing ('full' pushed it
-- when it happened). `at` is the claim's time (the record's `u` while leased).
local function hist_claim(hkey, at, detail)
  if HIST_LEVEL == 'transitions' then push_hist(hkey, at, 'claimed', detail) end
end

-- Capped global event stream for the dashboard (one entry per batch on the hot path).
local function event(ekey, at, kind, id, detail)
  redis.call('XADD', ekey, 'MAXLEN', '~', EVENTS_CAP, '*',
    'at', fmt(at), 'kind', kind, 'id', id, 'detail', detail)
end

-- JSON built by hand: cheaper than cjson on the hot path. Safe because kinds are literals
-- and ids are task ids (hex, checked by the Rust side before any script runs).
local function wake_msg(kind, id, at)
  return '{"kind":"' .. kind .. '","id":"' .. id .. '","at_ms":' .. fmt(at) .. '}'
end

-- The dashboard channel carries every state change; the web process derives each task's live
-- page from it (server/src/live_hub.rs), so there is no per-task channel to publish on.
local function notify_dash(kind, id, at)
  redis.call('PUBLISH', CH_DASH, wake_msg(kind, id, at))
end

-- Wake-ups (ARCHITECTURE.md, "Wake-ups"): one entry in the wake-up list per task made ready
-- now. An idle worker process blocks on BLPOP of that list, and Redis hands each entry to one
-- blocked client, so one unit of new work wakes one worker, not every idle one (as a Pub/Sub
-- message would). Claims remove as many entries as tasks they take (claim_apply), so the list
-- tracks ready work nobody has claimed yet; it is capped at WAKE_CAP (more entries than idle
-- workers wake nobody more). Missing entries cost latency only: workers also sleep at most 1 s.
local function wake_workers(wkey, n)
  if n < 1 then return end
  local add = math.min(n, WAKE_CAP - redis.call('LLEN', wkey))
  if add < 1 then return end
  local t = {}
  for i = 1, add do t[i] = '1' end
  redis.call('RPUSH', wkey, unpack(t))
end

-- One dashboard message for a batch: `kind`/`id` as for one task (id = the first), plus `ids`
-- with every id when there is more than one.
local function notify_dash_batch(kind, ids, at)
  if #ids == 1 then
    notify_dash(kind, ids[1], at)
  elseif #ids > 1 then
    redis.call('PUBLISH', CH_DASH, '{"kind":"' .. kind .. '","id":"' .. ids[1] .. '","ids":["'
      .. table.concat(ids, '","') .. '"],"at_ms":' .. fmt(at) .. '}')
  end
end

-- Time-bucketed throughput counter; the minute is indexed in a zset the first time it is
-- written so reap can trim old buckets without scanning the hash.
local function bump(tp, tpmin, now, field, by)
  local minute = now - (now % 60000)
  local v = redis.call('HINCRBY', tp, fmt(minute) .. ':' .. field, by)
  if v == by then
    redis.call('ZADD', tpmin, minute, fmt(minute))
  end
end

-- Histogram bucket of a whole number v >= 0 (model/src/histogram.rs, bucket_of): v itself
-- below 16, then each doubling cut in four (16-19, 20-23, 24-27, 28-31, 32-39, ...), capped at
-- 2^50 - 1. Integer arithmetic only (exact in a double), so Lua and Rust agree at every edge.
local function hbucket(v)
  v = math.min(math.max(math.floor(tonumber(v) or 0), 0), 1125899906842623)
  if v < 16 then return v end
  local e, base = 4, 16
  while v >= base * 2 do
    base = base * 2
    e = e + 1
  end
  return 16 + (e - 4) * 4 + math.floor((v - base) / (base / 4))
end

-- Adds one to t[k] and keeps the keys in first-seen order in t[1..] (not pairs(), whose order
-- is unspecified), so the writes made from the counts are deterministic.
local function count_in(t, k)
  if t[k] == nil then
    t[k] = 0
    t[#t + 1] = k
  end
  t[k] = t[k] + 1
end

-- Counts per histogram bucket for one call: tally(t, prefix, value), then bump_tally.
local function tally(t, prefix, v)
  count_in(t, prefix .. hbucket(v))
end

-- One HINCRBY per bucket of the tally, in the minute's "<minute>:<prefix><bucket>" field; a
-- field written for the first time is indexed in the minutes zset as that field's name (scored
-- by its minute), so reap can delete it without knowing which buckets a minute used.
local function bump_tally(tp, tpmin, now, t)
  local minute = now - (now % 60000)
  for _, f in ipairs(t) do
    local field = fmt(minute) .. ':' .. f
    if redis.call('HINCRBY', tp, field, t[f]) == t[f] then
      redis.call('ZADD', tpmin, minute, field)
    end
  end
end

-- Move a task record to dead. Callers have already removed it from the due/lease/retry sets
-- and ready lists.
local function to_dead(tkey, hkey, ekey, deadz, id, now, reason, detail)
  redis.call('HSET', tkey, 's', 'dead', 'dr', reason, 'u', fmt(now))
  redis.call('HDEL', tkey, 'w', 'ld')
  redis.call('ZADD', deadz, now, id)
  hist(hkey, now, 'dead', reason .. (detail ~= '' and (': ' .. detail) or ''))
  event(ekey, now, 'dead', id, reason)
end

-- The ready list of a priority ('bg' or anything else = interactive).
local function ready_list(pr, readyk, bgk)
  if pr == 'bg' then return bgk end
  return readyk
end

-- Make a task due: now (the tail of its ready list) or later (the due zset). The retry zset
-- mirrors due-later members that have failed at least once, so stats count "retrying" with one
-- ZCOUNT. Callers have removed it from wherever it was. `extra`: more fields for the same HSET.
-- A tenant's interactive task made ready now goes to the due zset at `now` instead: the next
-- claim gives it its fair-share place ("Fair shares" below), which needs the claim's keys.
local function to_due(tkey, readyk, bgk, duez, retryz, id, pr, at, attempts, now, extra)
  if at <= now and (pr == 'bg' or redis.call('HEXISTS', tkey, 'tn') == 0) then
    redis.call('RPUSH', ready_list(pr, readyk, bgk), id)
  elseif at <= now then
    redis.call('ZADD', duez, now, id)
  else
    redis.call('ZADD', duez, at, id)
    if attempts > 0 then redis.call('ZADD', retryz, at, id) end
  end
  local f = { 's', 'due', 'u', fmt(now) }
  if extra then
    for i = 1, #extra do f[#f + 1] = extra[i] end
  end
  redis.call('HSET', tkey, unpack(f))
  redis.call('HDEL', tkey, 'w', 'ld')
end

-- Take a due task out of wherever it waits (the due zset, or its ready list: LREM is O(n) in
-- the list's length, so it is only used by rare admin actions, never by workers).
-- A tenant's task may instead wait in the fair zset, as "<tenant>|<id>".
local function unqueue(readyk, bgk, duez, retryz, id, pr, fairz, tn)
  if redis.call('ZREM', duez, id) == 1 then
    redis.call('ZREM', retryz, id)
    return
  end
  if tn and tn ~= '' and redis.call('ZREM', fairz, tn .. '|' .. id) == 1 then return end
  if redis.call('LREM', ready_list(pr, readyk, bgk), 1, id) == 0 then
    -- Its priority changed while it waited (a join) or it sits in the other list.
    redis.call('LREM', ready_list(pr == 'bg' and '' or 'bg', readyk, bgk), 1, id)
  end
end

-- ---------------------------------------------------------------------------------------------
-- Claiming, shared by claim.lua and the claim-next part of complete / reschedule / fail.
-- claim_read() only reads; claim_apply() writes. A script calls claim_read() before its own
-- first write (the undeclared-keys rule above) and claim_apply() after its own writes.
--
-- Order: due-now members of the due zset (polls and retries of work already started), then the
-- interactive ready list, then the background list; but while background work waits, every
-- SHARE-th claim goes to it (the counter in KEYS share), so background never starves.
-- Background members of the due zset are skipped over (left in place) while interactive work
-- fills the slots. At most `max_n` members of each source are read. Interactive work of
-- tenants takes its turn with the untenanted work by fair shares (below).
local SHARE = 10
local CLAIM_FIELDS = { 's', 'q', 'a', 'p', 'm', 'c', 'dl', 'pr', 'pl', 'tn' }

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

-- ---------------------------------------------------------------------------------------------
-- The circuit breaker of the upstream (ARCHITECTURE.md, "Circuit breaker"): a hash at
-- K.breaker, absent while closed (so a closed breaker costs no command: claim_read asks
-- EXISTS of the pause flag, the breaker and the fair zset in one call). Fields: st ('open' | 'half'),
-- since (opened at), to (open: end of the cool-down), probe (half: the task id of the one
-- probe), pd (half: the probe's lease deadline), why (the error that opened it), by ('auto' or
-- the admin who opened it by hand). Opened by fail.lua (an error rate over the last minute),
-- half-open by the first claim after the cool-down (that claim takes one task, the probe),
-- closed by the probe's success (complete / reschedule) or by hand; a failed probe reopens it.
local function breaker_read(K)
  local b = redis.call('HMGET', K.breaker, 'st', 'to', 'probe', 'pd')
  if not b[1] then return nil end
  return { st = b[1], to = num(b[2], 0), probe = b[3] or '', pd = num(b[4], 0) }
end

local function breaker_notice(kind, at)
  redis.call('PUBLISH', CH_DASH, '{"kind":"' .. kind .. '","id":"","at_ms":' .. fmt(at) .. '}')
end

-- Closes the breaker and wakes a worker per task ready now (they waited for it).
local function breaker_close(K, now, why)
  redis.call('DEL', K.breaker)
  event(K.events, now, 'breaker', '', 'closed: ' .. why)
  breaker_notice('breaker_closed', now)
  wake_workers(K.wake, redis.call('LLEN', K.ready) + redis.call('LLEN', K.bg)
    + redis.call('ZCOUNT', K.due, '-inf', now))
end

-- Closes the breaker if `br` (as read before this script's writes) is half-open and the probe
-- is among `ids`, the tasks this call saw succeed (a final answer or a poll).
local function breaker_succeeded(K, br, ids, now)
  if br == nil or br.st ~= 'half' then return end
  for _, id in ipairs(ids) do
    if id == br.probe then
      breaker_close(K, now, 'probe ' .. id .. ' succeeded')
      return
    end
  end
end

-- K: {ready, bg, due, retry, lease, token, paused, share, events, fair, fairt, fairv, fairc,
-- fairr, breaker, wake}; FP: fair_policy().
-- Returns the plan (nil: nothing to claim) and the breaker as read (nil: closed).
local function claim_read(K, FP, max_n, now)
  if max_n < 1 then return nil, nil end
  -- One command while nothing is special (not paused, breaker closed, no tenant waiting): the
  -- hot path of a deployment without tenants costs what it did before fair shares.
  local br = nil
  local fair_on = false
  local flags = redis.call('EXISTS', K.paused, K.breaker, K.fair)
  if flags > 0 then
    br = breaker_read(K)
    if redis.call('EXISTS', K.paused) == 1 then return nil, br end
    fair_on = flags - (br and 1 or 0) > 0
  end
  local probe = false
  if br then
    -- Open and cooling down, or half-open with its probe still leased: nothing is claimed.
    if br.st == 'open' and now < br.to then return nil, br end
    if br.st == 'half' and now < br.pd then return nil, br end
    -- The cool-down is over (or the last probe's lease ran out): one task goes, the probe.
    max_n = 1
    probe = true
  end
  local zs = redis.call('ZRANGEBYSCORE', K.due, '-inf', now, 'LIMIT', 0,
    max_n + (fair_on and FAIR_PROMOTE or 0))
  local ilen = redis.call('LLEN', K.ready)
  local blen = redis.call('LLEN', K.bg)
  if #zs == 0 and ilen == 0 and blen == 0 and not fair_on then return nil, br end
  local function rd(id)
    return redis.call('HMGET', PREFIX .. 't:' .. id, unpack(CLAIM_FIELDS))
  end
  local plan = { take = {}, zrem = {}, retry_rem = {}, pop_i = 0, pop_b = 0, share = nil,
    probe = probe, fair = nil, promote = {}, fair_rem = {} }
  -- The fair-share state, read the first time it is needed: V, the tenants' last tags (and
  -- which changed, in first-changed order: count_in), leases held, rate arrival times.
  local F = nil
  local function fair_state()
    if F == nil then
      local v = num(redis.call('GET', K.fairv), 0)
      F = { v = v, v0 = v, last = {}, moved = {}, held = {}, tat = {}, tat_moved = {} }
      plan.fair = F
    end
    return F
  end
  -- A tenant's value read once per claim and kept in fair_state()[field] (0 when absent).
  local function cached(field, tn, read)
    local st = fair_state()
    if st[field][tn] == nil then st[field][tn] = num(read(), 0) end
    return st[field][tn]
  end
  local function last_of(tn)
    return cached('last', tn, function() return redis.call('ZSCORE', K.fairt, tn) end)
  end
  local function set_last(tn, tag)
    local st = fair_state()
    count_in(st.moved, tn)
    st.last[tn] = tag
  end
  local seen = {}
  local zi, zb = {}, {}
  for _, id in ipairs(zs) do
    local f = rd(id)
    if f[1] == 'due' and not seen[id] then
      seen[id] = true
      if f[8] == 'bg' then
        zb[#zb + 1] = { id, f, true }
      elseif f[10] and f[10] ~= '' then
        -- A tenant's task due now: promoted into the fair zset with a fresh tag.
        local tag = math.max(fair_state().v, last_of(f[10])) + 1
        set_last(f[10], tag)
        plan.promote[#plan.promote + 1] = { member = fair_member(f[10], id), tag = tag,
          tn = f[10], id = id, f = f }
        plan.zrem[#plan.zrem + 1] = id
        if num(f[3], 0) > 0 then plan.retry_rem[#plan.retry_rem + 1] = id end
      else
        zi[#zi + 1] = { id, f, true }
      end
    else
      -- A member without a due record can never be claimed: drop it so it stops shadowing
      -- real work at the head of the set.
      plan.zrem[#plan.zrem + 1] = id
      plan.retry_rem[#plan.retry_rem + 1] = id
    end
  end
  -- The fair candidates in tag order: the promoted tasks, the zset's head and its front.
  local fc = {}
  if fair_on or #plan.promote > 0 then
    local st = fair_state()
    local have = {}
    local function add(m, tag, p)
      if have[m] then return end
      have[m] = true
      local tn, id = fair_split(m)
      fc[#fc + 1] = { member = m, tag = tag, tn = tn, id = id, p = p }
    end
    for _, p in ipairs(plan.promote) do add(p.member, p.tag, p) end
    if fair_on then
      local w = max_n + FAIR_WINDOW
      local head = redis.call('ZRANGE', K.fair, 0, w - 1, 'WITHSCORES')
      for i = 1, #head, 2 do add(head[i], tonumber(head[i + 1]), nil) end
      local front = redis.call('ZRANGEBYSCORE', K.fair, fmt(st.v), '+inf', 'WITHSCORES',
        'LIMIT', 0, w)
      for i = 1, #front, 2 do add(front[i], tonumber(front[i + 1]), nil) end
    end
    table.sort(fc, function(a, b)
      if a.tag ~= b.tag then return a.tag < b.tag end
      return a.member < b.member
    end)
  end
  local function held(tn)
    return cached('held', tn, function() return redis.call('HGET', K.fairc, tn) end)
  end
  local function tat_of(tn)
    return cached('tat', tn, function() return redis.call('ZSCORE', K.fairr, tn) end)
  end
  local function within_limits(tn)
    if FP.cap > 0 and held(tn) >= FP.cap then return false end
    if FP.interval > 0 and math.max(tat_of(tn), now) - now > (FP.burst - 1) * FP.interval then
      return false
    end
    return true
  end
  local function charge(tn)
    local st = fair_state()
    st.held[tn] = held(tn) + 1
    if FP.interval > 0 then
      st.tat[tn] = math.max(tat_of(tn), now) + FP.interval
      count_in(st.tat_moved, tn)
    end
  end
  local fc_at = 1
  local fbuf = nil
  -- The next fair candidate within its tenant's limits whose record is still due (others
  -- stay where they are; stale members are dropped), without taking it.
  local function peek_fair()
    if fbuf then return fbuf end
    while fc_at <= #fc do
      local c = fc[fc_at]
      fc_at = fc_at + 1
      if within_limits(c.tn) then
        local f = c.p and c.p.f
        if not f and not seen[c.id] then
          local r = rd(c.id)
          if r[1] == 'due' and r[10] == c.tn and r[8] ~= 'bg' then
            f = r
          else
            plan.fair_rem[#plan.fair_rem + 1] = c.member
          end
        end
        if f then
          seen[c.id] = true
          fbuf = { c.id, f, false, c }
          return fbuf
        end
      end
    end
    return nil
  end
  local li = ilen > 0 and redis.call('LRANGE', K.ready, 0, max_n - 1) or {}
  local lb = blen > 0 and redis.call('LRANGE', K.bg, 0, max_n - 1) or {}
  -- One source per priority: its due zset members first, then its list, whose consumed head
  -- entries are popped even when stale (a list entry whose record is not due any more is a
  -- leftover of a join that moved the task, or of a cancel). `popped` counts list entries.
  local src_i = { z = zi, z_at = 1, list = li, popped = 0, buf = nil }
  local src_b = { z = zb, z_at = 1, list = lb, popped = 0, buf = nil }
  local function next_of(src)
    if src.buf then
      local c = src.buf
      src.buf = nil
      return c
    end
    if src.z_at <= #src.z then
      src.z_at = src.z_at + 1
      return src.z[src.z_at - 1]
    end
    while src.popped < #src.list do
      src.popped = src.popped + 1
      local id = src.list[src.popped]
      if not seen[id] then
        local f = rd(id)
        if f[1] == 'due' then seen[id] = true; return { id, f, false } end
      end
    end
    return nil
  end
  -- The next interactive task: the untenanted lane or the fair zset, by start tag.
  local function next_i()
    local fcand = peek_fair()
    if fcand == nil then return next_of(src_i) end
    if src_i.buf == nil then src_i.buf = next_of(src_i) end
    local st = fair_state()
    local c = fcand[4]
    if src_i.buf then
      local ltag = math.max(st.v, last_of('')) + 1
      if ltag <= c.tag then
        set_last('', ltag)
        st.v = math.max(st.v, ltag)
        return next_of(src_i)
      end
    end
    fbuf = nil
    st.v = math.max(st.v, c.tag)
    charge(c.tn)
    if c.p then c.p.taken = true else plan.fair_rem[#plan.fair_rem + 1] = c.member end
    return fcand
  end
  local function next_b() return next_of(src_b) end
  local bg_waits = #zb > 0 or blen > 0
  local turn = 0
  if bg_waits then turn = num(redis.call('GET', K.share), 0) end
  while #plan.take < max_n do
    local c = nil
    if bg_waits and turn >= SHARE - 1 then
      c = next_b()
      if c then turn = 0 end
    end
    if not c then
      c = next_i()
      if c then turn = turn + 1 end
    end
    if not c then
      c = next_b()
      if c then turn = 0 end
    end
    if not c then break end
    plan.take[#plan.take + 1] = c
    if c[3] then
      plan.zrem[#plan.zrem + 1] = c[1]
      if num(c[2][3], 0) > 0 then plan.retry_rem[#plan.retry_rem + 1] = c[1] end
    end
  end
  -- A list entry read for a lane comparison but not taken stays in its list.
  if src_i.buf and not src_i.buf[3] then src_i.popped = src_i.popped - 1 end
  if bg_waits then plan.share = turn end
  plan.pop_i = src_i.popped
  plan.pop_b = src_b.popped
  return plan, br
end

-- The read of a script that ends a task and may lease its caller the next ones: the claim plan
-- when `next_n` > 0, and the breaker either way (its probe's outcome may close or reopen it).
local function claim_next_read(K, FP, next_n, now)
  if next_n > 0 then return claim_read(K, FP, next_n, now) end
  return nil, breaker_read(K)
end

-- Fencing tokens: strictly increasing per queue, and never below now_ms * TOKEN_PER_MS (Redis
-- time). Why the floor: Redis replicates asynchronously, so a failover can lose a claim that a
-- worker already holds; the promoted replica's counter may then lag behind tokens already
-- handed out, and a plain counter would hand the same token out twice (two workers fenced as
-- one). Its clock does not lag: the first claim after the failover finds the counter below the
-- time floor and moves it past every token the old primary issued. To keep that to one command
-- per claim (INCRBY), a move sets the counter TOKEN_AHEAD_MS ahead of the floor, so the next
-- claims of that half second find it above the floor and only count; the guarantee then holds
-- for a failover that takes longer than TOKEN_AHEAD_MS plus the replication lag (a Redis Cluster
-- needs at least its node timeout, 1 s at the least in practice, Sentinel its down-after
-- period) and fewer than 1,024 tokens a millisecond. Returns `base`: the n tokens are
-- base + 1 .. base + n. Exact in a double until about the year 2250.
local TOKEN_PER_MS = 1024
local TOKEN_AHEAD_MS = 500
local function take_tokens(tokenk, n, now)
  local v = redis.call('INCRBY', tokenk, n)
  local floor = now * TOKEN_PER_MS
  if v - n >= floor then return v - n end
  local base = floor + TOKEN_AHEAD_MS * TOKEN_PER_MS
  redis.call('SET', tokenk, fmt(base + n))
  return base
end

-- The fair-share writes of a plan: promoted tasks into the fair zset (those not taken at once),
-- taken and stale members out, the tenants' new last tags and V, the rate arrival times, and
-- one more lease held per tenant task taken.
local function fair_apply(K, plan, now)
  local F = plan.fair
  if F then
    local add = {}
    for _, p in ipairs(plan.promote) do
      if not p.taken then
        add[#add + 1] = fmt(p.tag)
        add[#add + 1] = p.member
      end
    end
    if #add > 0 then redis.call('ZADD', K.fair, unpack(add)) end
    if #plan.fair_rem > 0 then redis.call('ZREM', K.fair, unpack(plan.fair_rem)) end
    local lasts = {}
    for _, tn in ipairs(F.moved) do
      if F.last[tn] > F.v then
        lasts[#lasts + 1] = fmt(F.last[tn])
        lasts[#lasts + 1] = tn
      end
    end
    if #lasts > 0 then redis.call('ZADD', K.fairt, unpack(lasts)) end
    if F.v ~= F.v0 then
      redis.call('SET', K.fairv, fmt(F.v))
      redis.call('ZREMRANGEBYSCORE', K.fairt, '-inf', fmt(F.v))
    end
    if #F.tat_moved > 0 then
      local tats = {}
      for _, tn in ipairs(F.tat_moved) do
        tats[#tats + 1] = string.format('%.3f', F.tat[tn])
        tats[#tats + 1] = tn
      end
      redis.call('ZADD', K.fairr, unpack(tats))
      redis.call('ZREMRANGEBYSCORE', K.fairr, '-inf', fmt(now))
    end
  end
  local held = {}
  for _, c in ipairs(plan.take) do
    local tn = c[2][10]
    if tn and tn ~= '' then count_in(held, tn) end
  end
  for _, tn in ipairs(held) do redis.call('HINCRBY', K.fairc, tn, held[tn]) end
end

-- Leases the planned tasks to `worker`; returns the claimed rows
-- {id, query, payload, token, attempts, polls, max_attempts, created, deadline, lease_deadline}.
-- `woken` is 1 when the caller's own BLPOP already took one wake-up entry for this claim: it
-- removes one entry fewer (and none when it claims nothing: that entry was for work someone
-- else took).
local function claim_apply(K, plan, worker, lease_ms, now, woken)
  local out = {}
  local untoken = (plan == nil and 0 or #plan.take) - (woken or 0)
  if untoken > 0 then redis.call('LPOP', K.wake, untoken) end
  if plan == nil then return out end
  if plan.pop_i > 0 then redis.call('LTRIM', K.ready, plan.pop_i, -1) end
  if plan.pop_b > 0 then redis.call('LTRIM', K.bg, plan.pop_b, -1) end
  if #plan.zrem > 0 then redis.call('ZREM', K.due, unpack(plan.zrem)) end
  if #plan.retry_rem > 0 then redis.call('ZREM', K.retry, unpack(plan.retry_rem)) end
  if plan.share ~= nil then redis.call('SET', K.share, fmt(plan.share)) end
  fair_apply(K, plan, now)
  local n = #plan.take
  if n == 0 then return out end
  local now_s = fmt(now)
  local deadline = now + lease_ms
  local deadline_s = fmt(deadline)
  local token = take_tokens(K.token, n, now)
  local ids = {}
  local lease_args = {}
  for i = 1, n do
    local c = plan.take[i]
    local id, f = c[1], c[2]
    token = token + 1
    local token_s = fmt(token)
    local tkey = PREFIX .. 't:' .. id
    redis.call('HSET', tkey, 's', 'leased', 'tk', token_s, 'w', worker, 'ld', deadline_s,
      'u', now_s)
    ids[i] = id
    lease_args[2 * i - 1] = deadline_s
    lease_args[2 * i] = id
    out[i] = { id, f[2] or '', f[9] or '', token, num(f[3], 0), num(f[4], 0), num(f[5], 0),
      num(f[6], 0), num(f[7], 0), deadline }
  end
  redis.call('ZADD', K.lease, unpack(lease_args))
  if plan.probe then
    -- Half-open: this one task is the probe; no other claim until its outcome or its lease
    -- deadline (a crashed prober's lease runs out and the next claim probes again).
    redis.call('HSET', K.breaker, 'st', 'half', 'probe', ids[1], 'pd', deadline_s)
    event(K.events, now, 'breaker', ids[1], 'half-open: probe by ' .. worker)
    breaker_notice('breaker_half_open', now)
  end
  event(K.events, now, 'claimed', ids[1], fmt(n) .. ' by ' .. worker)
  notify_dash_batch('claimed', ids, now)
  -- 'full' history only, and last: these may create undeclared keys (see the top).
  if HIST_LEVEL == 'full' then
    for i = 1, n do
      push_hist(PREFIX .. 'h:' .. ids[i], now, 'claimed', 'by ' .. worker .. ' token ' .. fmt(out[i][4]))
    end
  end
  return out
end
