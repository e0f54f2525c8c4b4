-- prelude/claims.lua: reading and applying a claim (claim.lua and the claim-next part of
-- complete / reschedule / fail).
-- The keys every claiming function declares first, `[claim]` in its header (key_decl.rs):
-- KEYS group claim: ready ready_bg due retry lease token paused share events
-- KEYS group claim: fair fairt fairv fairc fairr breaker wakeups

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
local CLAIM_FIELDS = { 's', 'q', 'a', 'p', 'm', 'c', 'dl', 'pr', 'pl', 'tn', 'rf', 'tc', 'tl', 'j' }

-- K: the function's keys by name, the [claim] group among them; FP: claim_limits().
-- Returns the plan (nil: nothing to claim) and the breaker as read (nil: closed).
-- The per-tenant limits, the last three ARGV of every claiming function: their fair_policy(),
-- nil when they are bad.
local function claim_limits(ARGV)
  return fair_policy(ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV])
end

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
  -- The heads of both ready lists. A non-empty list is always read, so reading it at once saves
  -- the LLEN that used to come first; an empty one answers {} as cheaply as LLEN answered 0.
  local li = redis.call('LRANGE', K.ready, 0, max_n - 1)
  local lb = redis.call('LRANGE', K.ready_bg, 0, max_n - 1)
  if #zs == 0 and #li == 0 and #lb == 0 and not fair_on then return nil, br end
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
  local bg_waits = #zb > 0 or #lb > 0
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
-- {id, query, payload, token, attempts, polls, max_attempts, created, deadline, lease_deadline,
-- refresh (1/0), trace context, joiners' contexts (both '' while tracing is off), tenant ('' =
-- none)}.
-- `woken` is 1 when the caller's own BLPOP already took one wake-up entry for this claim: it
-- removes one entry fewer (and none when it claims nothing: that entry was for work someone
-- else took).
local function claim_apply(K, plan, worker, lease_ms, now, woken)
  local out = {}
  local untoken = (plan == nil and 0 or #plan.take) - (woken or 0)
  if untoken > 0 then redis.call('LPOP', K.wakeups, untoken) end
  if plan == nil then return out end
  if plan.pop_i > 0 then redis.call('LTRIM', K.ready, plan.pop_i, -1) end
  if plan.pop_b > 0 then redis.call('LTRIM', K.ready_bg, plan.pop_b, -1) end
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
    -- Then 1 for a refresh (`rf`), so the worker can count refreshes by outcome; last the
    -- trace contexts (`tc`, `tl`; '' while tracing is off) its process span links to; then the
    -- tenant its process span names (read for fair shares anyway: no read more, 6 bytes of
    -- reply for none); last a job API's job (`j`, '' before the submit).
    out[i] = { id, f[2] or '', f[9] or '', token, num(f[3], 0), num(f[4], 0), num(f[5], 0),
      num(f[6], 0), num(f[7], 0), deadline, f[11] and 1 or 0, f[12] or '', f[13] or '',
      f[10] or '', f[14] or '' }
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
