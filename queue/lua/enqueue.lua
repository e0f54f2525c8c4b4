-- enqueue.lua: create a task (ready now), join the live one, or hand back a fresh stored result.
-- Atomic, so 50 concurrent callers for one query get exactly one 'created'.
-- The new record holds only non-default fields (prelude.lua), goes to the tail of its
-- priority's ready list, and writes no history (the enqueue is shown from the record's `c`).
-- A join by an interactive caller raises a background task to interactive (the higher
-- priority of its requesters): its record, and its place if it waits in the background list.
-- KEYS[1] task hash   KEYS[2] result string   KEYS[3] partial string   KEYS[4] history list
-- KEYS[5] ready list   KEYS[6] background ready list   KEYS[7] dead zset   KEYS[8] due zset
-- KEYS[9] wake-up list (prelude: one entry per task made ready)
-- KEYS[10] fair zset   KEYS[11] tenants' last tags zset   KEYS[12] V string (prelude/fair.lua, "Fair
-- shares": a tenant's new interactive task waits in the fair zset, not the ready list)
-- ARGV[1..6] common (see prelude)   ARGV[7] id   ARGV[8] normalised query   ARGV[9] payload
-- ARGV[10] deadline_ms (whole life, 0 = none)   ARGV[11] max_attempts (0 = unlimited)
-- KEYS[13] meta hash of this slot (read only; keys.rs `meta`)
-- ARGV[12] priority ('interactive' | 'bg')   ARGV[13] tenant ('' = none; at most 64 bytes, no
-- '|'). A join keeps the task's own tenant: a query asked by two tenants is one task, counted
-- once, for the one who asked first.
-- ARGV[14] the partition count this process runs with. The slot's meta holds the queue's count
-- once a repartition has written it there (and, in the control slot `{name}`, `moving_to`
-- while one runs): when it differs, the task would be written into a layout the queue no
-- longer reads, so nothing is written and the caller is told (repartition.rs). An absent
-- count (a slot no repartition has touched) is the process's own.
-- Returns {'joined', fields, partial|false, due_score|false}
--       | {'stored', packed result}
--       | {'created', fields, false, false}     where fields is the record's HGETALL.
--       | {'moved', the queue's partition count (or the one it is moving to)}
local tkey = KEYS[1]
local rkey = KEYS[2]
local pkey = KEYS[3]
local hkey = KEYS[4]
local readyk = KEYS[5]
local bgk = KEYS[6]
local deadz = KEYS[7]
local duez = KEYS[8]
local wakek = KEYS[9]
local fairz = KEYS[10]
local fairt = KEYS[11]
local fairv = KEYS[12]
local id = ARGV[7]
local query = ARGV[8]
local payload = ARGV[9]
local deadline_ms = tonumber(ARGV[10])
local max_attempts = tonumber(ARGV[11])
local pr = ARGV[12]
local tn = ARGV[13]
local metak = KEYS[13]
local layout = tonumber(ARGV[14])
if id == nil or id == '' or query == nil or query == '' or payload == nil
  or deadline_ms == nil or deadline_ms < 0 or max_attempts == nil or max_attempts < 0
  or (pr ~= 'interactive' and pr ~= 'bg') or #KEYS ~= 13 or tn == nil or #tn > 64
  or string.find(tn, '|', 1, true) or layout == nil or layout < 1 then
  return redis.error_reply('ERR repoll enqueue: bad arguments')
end

local m = redis.call('HMGET', metak, 'partitions', 'moving_to')
if m[2] or (m[1] and tonumber(m[1]) ~= layout) then
  return { 'moved', m[2] or m[1] }
end

local f = redis.call('HMGET', tkey, 's', 'pr', 'tn')
local state = f[1]
if state == 'due' or state == 'leased' then
  if pr == 'interactive' and f[2] == 'bg' then
    redis.call('HDEL', tkey, 'pr')
    if state == 'due' and redis.call('LREM', bgk, 1, id) > 0 then
      if f[3] then
        -- A tenant's task: due now, the next claim gives it its fair place.
        redis.call('ZADD', duez, now_ms(), id)
      else
        redis.call('RPUSH', readyk, id)
      end
    end
  end
  return { 'joined', redis.call('HGETALL', tkey), redis.call('GET', pkey),
    redis.call('ZSCORE', duez, id) }
end
if state ~= 'dead' then
  local stored = redis.call('GET', rkey)
  if stored then return { 'stored', stored } end
end

local now = now_ms()
if state == 'dead' then
  -- Asking again for a dead query starts a fresh life; the old history stays.
  redis.call('ZREM', deadz, id)
  redis.call('DEL', tkey, pkey)
  hist(hkey, now, 'enqueued', 're-enqueued after dead')
end
local rec = { 'q', query, 's', 'due', 'c', fmt(now) }
if max_attempts > 0 then rec[#rec + 1] = 'm'; rec[#rec + 1] = fmt(max_attempts) end
if deadline_ms > 0 then rec[#rec + 1] = 'dl'; rec[#rec + 1] = fmt(now + deadline_ms) end
if pr == 'bg' then rec[#rec + 1] = 'pr'; rec[#rec + 1] = 'bg' end
if payload ~= '' then rec[#rec + 1] = 'pl'; rec[#rec + 1] = payload end
if tn ~= '' then rec[#rec + 1] = 'tn'; rec[#rec + 1] = tn end
local tag = nil
if tn ~= '' and pr ~= 'bg' then tag = fair_tag(fairt, fairv, tn) end
redis.call('HSET', tkey, unpack(rec))
if tag then
  redis.call('ZADD', fairt, tag, tn)
  redis.call('ZADD', fairz, tag, fair_member(tn, id))
else
  redis.call('RPUSH', ready_list(pr, readyk, bgk), id)
end
-- A cancelled or finished earlier life's history has a TTL: it belongs to this life now.
redis.call('PERSIST', hkey)
notify_dash('enqueued', id, now)
wake_workers(wakek, 1)
return { 'created', rec, false, false }
