-- enqueue.lua: answer one ask of a query from what is stored, and make sure one task works on
-- it when that is needed: create the task (ready now), join the live one, or hand back the
-- stored result — fresh, or stale with its refresh (ARCHITECTURE.md, "A result's life").
-- Atomic, so 50 concurrent callers for one query get exactly one 'created' (or one refresh).
-- The new record holds only non-default fields (prelude.lua), goes to the tail of its
-- priority's ready list, and writes no history (the enqueue is shown from the record's `c`).
-- A join by an interactive caller raises a background task to interactive (the higher
-- priority of its requesters): its record, and its place if it waits in the background list.
-- KEYS: task result partial hist ready ready_bg dead due wakeups fair fairt fairv meta tp tpmin
-- (`meta`: this slot's copy of the layout, read only; `fair`: a tenant's new interactive task
-- waits there, not in the ready list; `tp`: `ahead` per refresh-ahead started, which the
-- limit below reads — the answers by kind are counted by the process, answer_counts.rs)
-- ARGV[1..6] common (see prelude)   ARGV[7] id   ARGV[8] normalised query   ARGV[9] payload
-- ARGV[10] deadline_ms (whole life, 0 = none)   ARGV[11] max_attempts (0 = unlimited)
-- ARGV[12] priority ('interactive' | 'bg')   ARGV[13] tenant ('' = none; at most 64 bytes, no
-- '|'). A join keeps the task's own tenant: a query asked by two tenants is one task, counted
-- once, for the one who asked first.
-- ARGV[14] the partition count this process runs with. The slot's meta holds the queue's count
-- once a repartition has written it there (and, in the control slot `{name}`, `moving_to`
-- while one runs): when it differs, the task would be written into a layout the queue no
-- longer reads, so nothing is written and the caller is told (repartition.rs). An absent
-- count (a slot no repartition has touched) is the process's own.
-- ARGV[15] the fresh window ms (> 0)   ARGV[16] the caller's max age ms (-1 = none; 0 = nothing
-- is fresh for it: a refresh starts or is joined)   ARGV[17] failed window ms (negative
-- caching; 0 = none)   ARGV[18] '1' = only if cached (never create a task)
-- ARGV[19] hot asks (0 = no refresh-ahead; at most 99)   ARGV[20] refresh-ahead lead ms
-- ARGV[21] refreshes ahead the upstream may start per minute (N, the queue's whole limit)
-- ARGV[22] the caller's trace context: '' while tracing is off (nothing is stored), else a
-- version-00 W3C traceparent in lower-case hex (queue/src/trace_context.rs). A created task
-- keeps it as `tc`; a join appends it to `tl` (space-separated), at most ARGV[23] of them.
-- ARGV[24] which partition this slot is (0 .. ARGV[14] - 1). Of the N refreshes ahead a
-- minute, each of the P partitions may start N // P, and N % P of them one more, those whose
-- turn it is this minute (by partition and minute, so the extra ones go round): the shares
-- of one minute sum to N exactly, with no write outside this slot.
-- A stored result younger than the fresh window (and the caller's max age) is a fresh hit: no
-- task, unless it is hot (ARGV[19] asks counted in the stored value, prelude `count_ask`) and
-- within the lead of going stale, when one background refresh starts (at most this slot's
-- share of ARGV[21] a minute; none while its last refresh's death is within the failed
-- window). An older one is answered stale with its refresh: the live task joined, else a new
-- one (record field `rf`) — unless the last refresh died within the failed window (its dead
-- record is handed back: stale-if-error, no new try yet) or the caller asked only for what is
-- cached. With nothing stored, a task that died for good (reason fatal) within the failed
-- window is answered as it is (negative caching). Whether a stale result may still be shown
-- (which window, why) is the caller's to decide from its age and the refresh's state.
-- A web process may answer a fresh hit's next asks itself for `hold_ms` (0 = not at all):
-- while the stored result stays fresh, its asks are no longer counted and refresh-ahead's lead
-- is not reached (queue/src/hot_results.rs; it counts those answers with count_answers.lua).
-- Returns {'joined', fields, partial|false, due_score|false}
--       | {'stored', packed result, hold_ms}
--       | {'stale', packed result, fields|false, partial|false, due_score|false, created 0|1}
--       | {'negative', fields}
--       | {'created', fields, false, false}     where fields is the record's HGETALL.
--       | {'none'}                              only if cached, and nothing stored or running
--       | {'moved', the queue's partition count (or the one it is moving to)}
local tkey = K.task
local rkey = K.result
local pkey = K.partial
local hkey = K.hist
local readyk = K.ready
local bgk = K.ready_bg
local deadz = K.dead
local duez = K.due
local wakek = K.wakeups
local fairz = K.fair
local fairt = K.fairt
local fairv = K.fairv
local metak = K.meta
local tp = K.tp
local tpmin = K.tpmin
local id = ARGV[7]
local query = ARGV[8]
local payload = ARGV[9]
local deadline_ms = tonumber(ARGV[10])
local max_attempts = tonumber(ARGV[11])
local pr = ARGV[12]
local tn = ARGV[13]
local layout = tonumber(ARGV[14])
local fresh_ms = tonumber(ARGV[15])
local max_age = tonumber(ARGV[16])
local failed_ms = tonumber(ARGV[17])
local cached_only = ARGV[18] == '1'
local hot_asks = tonumber(ARGV[19])
local lead_ms = tonumber(ARGV[20])
local ahead_per_min = tonumber(ARGV[21])
local tc = ARGV[22]
local max_links = tonumber(ARGV[23])
local part = tonumber(ARGV[24])
local HEX = '[0-9a-f]'
local TRACEPARENT = '^00%-' .. string.rep(HEX, 32) .. '%-' .. string.rep(HEX, 16) .. '%-' ..
  HEX .. HEX .. '$'
if id == nil or id == '' or query == nil or query == '' or payload == nil
  or deadline_ms == nil or deadline_ms < 0 or max_attempts == nil or max_attempts < 0
  or (pr ~= 'interactive' and pr ~= 'bg') or tn == nil or #tn > 64
  or string.find(tn, '|', 1, true) or layout == nil or layout < 1
  or fresh_ms == nil or fresh_ms < 1 or max_age == nil or max_age < -1 or failed_ms == nil
  or failed_ms < 0 or (ARGV[18] ~= '1' and ARGV[18] ~= '0') or hot_asks == nil or hot_asks < 0
  or hot_asks > 99 or lead_ms == nil or lead_ms < 0 or ahead_per_min == nil
  or ahead_per_min < 0 or tc == nil or (tc ~= '' and not string.find(tc, TRACEPARENT))
  or max_links == nil or max_links < 0 or part == nil or part < 0 or part >= layout
  or part ~= math.floor(part) then
  return redis.error_reply('ERR repoll enqueue: bad arguments')
end

local m = redis.call('HMGET', metak, 'partitions', 'moving_to')
if m[2] or (m[1] and tonumber(m[1]) ~= layout) then
  return { 'moved', m[2] or m[1] }
end

local f = redis.call('HMGET', tkey, 's', 'pr', 'tn', 'dr', 'u')
local state = f[1]
local live = state == 'due' or state == 'leased'
local stored = redis.call('GET', rkey)
local now = now_ms()

-- Makes the task: a first ask, a refresh of a stored result (`refresh`), or a new life of a
-- dead task (its old history stays).
local function create(prio, refresh)
  if state == 'dead' then
    redis.call('ZREM', deadz, id)
    redis.call('DEL', tkey, pkey)
    hist(hkey, now, 'enqueued', 're-enqueued after dead')
  end
  local rec = { 'q', query, 's', 'due', 'c', fmt(now) }
  if max_attempts > 0 then rec[#rec + 1] = 'm'; rec[#rec + 1] = fmt(max_attempts) end
  if deadline_ms > 0 then rec[#rec + 1] = 'dl'; rec[#rec + 1] = fmt(now + deadline_ms) end
  if prio == 'bg' then rec[#rec + 1] = 'pr'; rec[#rec + 1] = 'bg' end
  if payload ~= '' then rec[#rec + 1] = 'pl'; rec[#rec + 1] = payload end
  if tn ~= '' then rec[#rec + 1] = 'tn'; rec[#rec + 1] = tn end
  if refresh then rec[#rec + 1] = 'rf'; rec[#rec + 1] = '1' end
  if tc ~= '' then rec[#rec + 1] = 'tc'; rec[#rec + 1] = tc end
  local tag = nil
  if tn ~= '' and prio ~= 'bg' then tag = fair_tag(fairt, fairv, tn) end
  redis.call('HSET', tkey, unpack(rec))
  if tag then
    redis.call('ZADD', fairt, tag, tn)
    redis.call('ZADD', fairz, tag, fair_member(tn, id))
  else
    redis.call('RPUSH', ready_list(prio, readyk, bgk), id)
  end
  -- A cancelled or finished earlier life's history has a TTL: it belongs to this life now.
  redis.call('PERSIST', hkey)
  notify_dash('enqueued', id, now)
  wake_workers(wakek, 1)
  return rec
end

-- Joins the live task; an interactive caller raises a background one. A traced joiner's
-- context becomes one more link of the task's process spans (the first max_links only).
local function join()
  if tc ~= '' then
    local links = redis.call('HGET', tkey, 'tl')
    if not links then
      redis.call('HSET', tkey, 'tl', tc)
    elseif (#links + 1) / (#tc + 1) < max_links then
      redis.call('HSET', tkey, 'tl', links .. ' ' .. tc)
    end
  end
  if pr == 'interactive' and f[2] == 'bg' then
    redis.call('HDEL', tkey, 'pr')
    if state == 'due' and redis.call('LREM', bgk, 1, id) > 0 then
      if f[3] then
        -- A tenant's task: due now, the next claim gives it its fair place.
        redis.call('ZADD', duez, now, id)
      else
        redis.call('RPUSH', readyk, id)
      end
    end
  end
  return redis.call('HGETALL', tkey), redis.call('GET', pkey), redis.call('ZSCORE', duez, id)
end

-- A dead task's death is recent enough to stand for its query (negative caching, and the
-- pause of a failed refresh).
local function died_recently()
  return state == 'dead' and failed_ms > 0 and now - num(f[5], 0) < failed_ms
end

if stored then
  local age = now - (result_completed(stored) or 0)
  local fresh_for = fresh_ms
  if max_age >= 0 and max_age < fresh_for then fresh_for = max_age end
  if age < fresh_for then
    -- How long this result stays a fresh hit for which this script would write nothing but
    -- the counter above: until refresh-ahead's lead (or the window's end without it); not at
    -- all while its asks are still counted, nor while a task for it runs (its asks wait).
    local hold = fresh_ms - age
    if hot_asks > 0 then
      hold = fresh_ms - lead_ms - age
    end
    if live then hold = 0 end
    if hot_asks > 0 and not live then
      local asks, counted = count_ask(rkey, stored, hot_asks)
      if counted then hold = 0 end
      if asks >= hot_asks and age >= fresh_ms - lead_ms and not died_recently() then
        local minute = now - (now % 60000)
        local started = tonumber(redis.call('HGET', tp, fmt(minute) .. ':ahead')) or 0
        local share = math.floor(ahead_per_min / layout)
        if (part - minute / 60000) % layout < ahead_per_min % layout then share = share + 1 end
        if started < share then
          create('bg', true)
          bump(tp, tpmin, now, 'ahead', 1)
        end
      end
    end
    return { 'stored', stored, math.max(hold, 0) }
  end
  if live then
    local fields, partial, due = join()
    return { 'stale', stored, fields, partial, due, 0 }
  end
  if died_recently() then
    return { 'stale', stored, redis.call('HGETALL', tkey), false, false, 0 }
  end
  if cached_only then
    return { 'stale', stored, false, false, false, 0 }
  end
  return { 'stale', stored, create(pr, true), false, false, 1 }
end

if live then
  local fields, partial, due = join()
  return { 'joined', fields, partial, due }
end
if died_recently() and f[4] == 'fatal' then
  return { 'negative', redis.call('HGETALL', tkey) }
end
if cached_only then
  return { 'none' }
end
return { 'created', create(pr, false), false, false }
