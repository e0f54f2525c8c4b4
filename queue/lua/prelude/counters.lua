-- prelude/counters.lua: throughput counters per minute and histogram buckets.

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
