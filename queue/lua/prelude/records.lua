-- prelude/records.lua: moving a task record between states (dead, due, out of its queue).

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

-- A stored result (decode.rs `packed_result` reads it): one string,
-- "completed,created,polls,token,latency_ms,#worker,#query,claimed,first_poll,last_poll,
-- #tenant,asks\n" then the worker id, the query, the tenant and the data (#: lengths in bytes).
-- `claimed` is when the lease that completed it began; `first_poll`/`last_poll` when its first
-- and last "still processing" answers came (0 = none): the task page tells its story from
-- these once the record is gone (the record's `lc`, `fp`, `lp`, read by the same HMGET).
-- `asks` is two digits, always "00" when written: the fresh hits counted for refresh-ahead
-- (enqueue.lua, `count_ask`), rewritten in place by SETRANGE so a hit never rewrites the data.
-- (A result stored by an older version has the first seven fields only, or those and `asks`.)
local function pack_result(now, created, polls, token, latency, who, query, data, story)
  -- The story's times are kept as how long before the completion they were, and an unknown
  -- one as an empty field: a few digits instead of a 13-digit epoch each, on every result.
  local function before(t)
    t = num(t, 0)
    if t > 0 and t <= now then return tostring(now - t) end
    return ''
  end
  return string.format('%d,%d,%d,%s,%s,%d,%d,%s,%s,%s,%d,00\n', now, created, polls, token,
    latency, #who, #query, before(story.claimed), before(story.first_poll),
    before(story.last_poll), #story.tenant) .. who .. query .. story.tenant .. data
end

-- The completion time of a stored result (its first field).
local function result_completed(packed)
  return tonumber(string.match(packed, '^(%d+),'))
end

-- Counts one fresh hit of the stored result in `rkey` (value `packed`), up to `cap`; returns
-- the asks counted so far this one included, and whether this one was written. The counter
-- is the header's last field, two digits right before the first newline (8 or 12 fields); a
-- result written before the counter existed (seven fields) counts nothing and returns 0.
-- Writes only while below `cap`, so a hot result costs at most `cap` writes per life.
local function count_ask(rkey, packed, cap)
  local nl = string.find(packed, '\n', 1, true)
  if nl == nil or nl < 4 then return 0, false end
  local head = string.sub(packed, 1, nl - 1)
  local _, commas = string.gsub(head, ',', '')
  if commas ~= 7 and commas ~= 11 then return 0, false end
  local asks = tonumber(string.sub(packed, nl - 2, nl - 1)) or 0
  if asks < cap then
    asks = asks + 1
    redis.call('SETRANGE', rkey, nl - 3, string.format('%02d', asks))
    return asks, true
  end
  return asks, false
end

-- A job API's job to cancel upstream: `job` (the record's `j`, nil for none) goes into the
-- `cancels` zset due now, as `<tries>|<id>|<job>`, where cancel_take.lua hands it to a worker.
-- Returns whether one was queued.
local function queue_upstream_cancel(cancels, id, job, now)
  if not job or job == '' then return false end
  redis.call('ZADD', cancels, now, '0|' .. id .. '|' .. job)
  return true
end
