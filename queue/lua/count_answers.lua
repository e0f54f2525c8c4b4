-- count_answers.lua: adds the answers a process gave from this slot, counted in its memory
-- (queue/src/answer_counts.rs; fresh hits answered from memory included), to the slot's
-- per-minute counters. Sent about once a second, so an answer is counted in the minute it was
-- given or the next.
-- KEYS: tp tpmin
-- ARGV[1..6] common   ARGV[7] fresh   ARGV[8] stale   ARGV[9] miss   ARGV[10] negative
-- (whole numbers >= 0, at least one of them > 0)
-- Returns the number of answers added.
local names = { 'fresh', 'stale', 'miss', 'negative' }
local counts = {}
local total = 0
for i = 1, 4 do
  local n = tonumber(ARGV[6 + i])
  if n == nil or n < 0 or n ~= math.floor(n) then
    return redis.error_reply('ERR repoll count_answers: bad arguments')
  end
  counts[i] = n
  total = total + n
end
if total < 1 then
  return redis.error_reply('ERR repoll count_answers: bad arguments')
end
local now = now_ms()
for i = 1, 4 do
  if counts[i] > 0 then bump(K.tp, K.tpmin, now, names[i], counts[i]) end
end
return total
