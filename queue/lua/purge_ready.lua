-- purge_ready.lua: one bounded chunk of purging a ready list or the fair zset (part of "purge
-- queued"): the first max_n entries are removed, and the records of those still due are
-- deleted with their partial data and history. The Rust side loops until it is empty.
-- Undeclared keys (derived from ARGV[6], same hash tag): {q}:t:<id>, {q}:p:<id>, {q}:h:<id>
-- of the ids read from the list; all are read before the first write, and only deleted.
-- KEYS: <list> events (<list>: a ready list or the fair zset)
-- ARGV[1..6] common   ARGV[7] who   ARGV[8] max_n (1..1000)   ARGV[9] 'list' | 'fair' (a zset of
-- "<tenant>|<id>", prelude.lua)
-- Returns the number of tasks removed in this chunk.
local listk = K.list
local ekey = K.events
local who = ARGV[7]
local max_n = tonumber(ARGV[8])
local kind = ARGV[9]
if who == nil or max_n == nil or max_n < 1 or max_n > 1000
  or (kind ~= 'list' and kind ~= 'fair') then
  return redis.error_reply('ERR repoll purge_ready: bad arguments')
end
local ids
if kind == 'list' then
  ids = redis.call('LRANGE', listk, 0, max_n - 1)
else
  ids = redis.call('ZRANGE', listk, 0, max_n - 1)
  for i, m in ipairs(ids) do ids[i] = string.match(m, '([^|]*)$') end
end
if #ids == 0 then return 0 end
local due = {}
for _, id in ipairs(ids) do
  if redis.call('HGET', PREFIX .. 't:' .. id, 's') == 'due' then due[#due + 1] = id end
end
local now = now_ms()
if kind == 'list' then
  redis.call('LTRIM', listk, #ids, -1)
else
  redis.call('ZREMRANGEBYRANK', listk, 0, #ids - 1)
end
for _, id in ipairs(due) do
  redis.call('DEL', PREFIX .. 't:' .. id, PREFIX .. 'p:' .. id, PREFIX .. 'h:' .. id)
end
if #due > 0 then
  event(ekey, now, 'purged', '', fmt(#due) .. ' queued by admin ' .. who)
  notify_dash('purged', '', now)
end
return #due
