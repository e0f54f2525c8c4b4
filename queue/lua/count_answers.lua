-- count_answers.lua: adds the fresh hits a web process answered from its own memory (the hot
-- results enqueue.lua let it hold, queue/src/hot_results.rs) to this slot's per-minute
-- counters, where enqueue.lua counts the ones it answers. Sent about once a second, so an
-- answer is counted in the minute it was given or the next.
-- KEYS: tp tpmin
-- ARGV[1..6] common   ARGV[7] answers to add (a whole number >= 1)
-- Returns the number added.
local n = tonumber(ARGV[7])
if n == nil or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR repoll count_answers: bad arguments')
end
bump(K.tp, K.tpmin, now_ms(), 'fresh', n)
return n
