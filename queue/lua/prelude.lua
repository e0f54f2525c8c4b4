-- prelude.lua: shared helpers, prepended to every script by scripts.rs (Redis has no `require`).
-- Every script receives the same five leading ARGV so these helpers need no per-script wiring:
--   ARGV[1] history_cap  ARGV[2] events_cap  ARGV[3] dashboard channel
--   ARGV[4] task channel prefix (channel = prefix .. id)  ARGV[5] wake channel
-- Script-specific ARGV start at ARGV[6]. Helpers never name keys themselves: every key is a
-- parameter whose value came from KEYS (checked by tests/scripts_keys.rs).
local HIST_CAP = tonumber(ARGV[1])
local EVENTS_CAP = tonumber(ARGV[2])
local CH_DASH = ARGV[3]
local CH_TASK = ARGV[4]
local CH_WAKE = ARGV[5]
if not HIST_CAP or HIST_CAP < 1 or not EVENTS_CAP or EVENTS_CAP < 1 then
  return redis.error_reply('ERR repoll: bad common ARGV')
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

-- Per-task capped history: "at|kind|detail". LTRIM only when over the cap (LPUSH returns
-- the length), which keeps the hot path one command per entry. `pend` (optional) is the
-- task's deferred "claimed" entry (see pending()), pushed first in the same LPUSH.
local function hist(hkey, at, kind, detail, pend)
  local e = fmt(at) .. '|' .. kind .. '|' .. detail
  local len
  if pend then
    len = redis.call('LPUSH', hkey, pend, e)
  else
    len = redis.call('LPUSH', hkey, e)
  end
  if len > HIST_CAP then
    redis.call('LTRIM', hkey, 0, HIST_CAP - 1)
  end
end

-- claim.lua does not LPUSH its "claimed" history entry: it stores the finished entry in the
-- record's `hpend` field (in the HSET it does anyway), and read.rs shows it on top of the
-- history while the task is leased. Every script that ends a lease (complete, reschedule,
-- fail, release, reap, cancel) reads `hpend` with the state and passes pending(state, hpend)
-- to its first hist() call, so the entry lands in the list, in order, exactly once: after
-- that the state is no longer 'leased' and a stale `hpend` is ignored until the next claim
-- overwrites it.
local function pending(state, p)
  if state == 'leased' and p and p ~= '' then
    return p
  end
  return nil
end

-- Capped global event stream for the dashboard.
local function event(ekey, at, kind, id, detail)
  redis.call('XADD', ekey, 'MAXLEN', '~', EVENTS_CAP, '*',
    'at', fmt(at), 'kind', kind, 'id', id, 'detail', detail)
end

-- JSON built by hand: cheaper than cjson on the hot path. Safe because kinds are literals
-- here and ids only come from task records, which enqueue creates with hex ids.
local function wake_msg(kind, id, at)
  return '{"kind":"' .. kind .. '","id":"' .. id .. '","at_ms":' .. fmt(at) .. '}'
end

-- Wake-up on the task's own channel (state is re-read by subscribers).
local function notify_task(id, kind, at)
  redis.call('PUBLISH', CH_TASK .. id, wake_msg(kind, id, at))
end

local function notify_dash(kind, id, at)
  redis.call('PUBLISH', CH_DASH, wake_msg(kind, id, at))
end

local function notify_wake(kind, id, at)
  redis.call('PUBLISH', CH_WAKE, wake_msg(kind, id, at))
end

-- Dashboard wake-up for a batch: `kind`/`id` as for one task (id = the first), plus `ids`
-- with every id when there is more than one. Ids are hex, so no escaping is needed.
local function notify_dash_batch(kind, ids, at)
  if #ids == 1 then
    notify_dash(kind, ids[1], at)
  else
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

-- Move a task record to dead. Callers have already removed it from due/lease/retry.
local function to_dead(tkey, hkey, ekey, deadz, id, now, reason, detail, pend)
  redis.call('HSET', tkey, 'state', 'dead', 'dead_reason', reason, 'updated', fmt(now),
    'lease_deadline', '0', 'worker', '')
  redis.call('ZADD', deadz, now, id)
  hist(hkey, now, 'dead', reason .. (detail ~= '' and (': ' .. detail) or ''), pend)
  event(ekey, now, 'dead', id, reason)
  notify_task(id, 'dead', now)
end

-- Put a task back on the due set at `at`. The retry zset mirrors due members that have
-- failed at least once, so stats can count "retrying" with one ZCOUNT.
local function to_due(tkey, duez, retryz, id, at, attempts, now)
  redis.call('ZADD', duez, at, id)
  if attempts > 0 then
    redis.call('ZADD', retryz, at, id)
  else
    redis.call('ZREM', retryz, id)
  end
  redis.call('HSET', tkey, 'state', 'due', 'due', fmt(at), 'updated', fmt(now),
    'lease_deadline', '0', 'worker', '')
end

