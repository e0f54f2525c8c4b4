-- purge_ready.lua: one bounded chunk of purging a ready list (part of "purge queued"): the
-- first max_n entries are removed, and the records of those still due are deleted with their
-- partial data and history. The Rust side loops until the list is empty.
-- Undeclared keys (derived from ARGV[6], same hash tag): {q}:t:<id>, {q}:p:<id>, {q}:h:<id>
-- of the ids read from the list; all are read before the first write, and only deleted.
-- KEYS[1] the ready list   KEYS[2] events stream
-- ARGV[1..6] common   ARGV[7] who   ARGV[8] max_n (1..1000)
-- Returns the number of tasks removed in this chunk.
local listk = KEYS[1]
local ekey = KEYS[2]
local who = ARGV[7]
local max_n = tonumber(ARGV[8])
if who == nil or max_n == nil or max_n < 1 or max_n > 1000 or #KEYS ~= 2 then
  return redis.error_reply('ERR repoll purge_ready: bad arguments')
end
local ids = redis.call('LRANGE', listk, 0, max_n - 1)
if #ids == 0 then return 0 end
local due = {}
for _, id in ipairs(ids) do
  if redis.call('HGET', PREFIX .. 't:' .. id, 's') == 'due' then due[#due + 1] = id end
end
local now = now_ms()
redis.call('LTRIM', listk, #ids, -1)
for _, id in ipairs(due) do
  redis.call('DEL', PREFIX .. 't:' .. id, PREFIX .. 'p:' .. id, PREFIX .. 'h:' .. id)
end
if #due > 0 then
  event(ekey, now, 'purged', '', fmt(#due) .. ' queued by admin ' .. who)
  notify_dash('purged', '', now)
end
return #due
