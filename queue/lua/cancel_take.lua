-- cancel_take.lua: hand a worker the upstream cancels that are due (queued by cancel.lua and
-- purge.lua for tasks with a job API's job), each leased to it for `lease_ms`: its score moves
-- past the lease, so no other worker takes it meanwhile, and a worker that dies mid-call leaves
-- it due again after the lease (a cancel may then be sent twice: upstreams answer a repeat
-- with 2xx, 404 or 409, all taken as done).
-- KEYS: cancels
-- ARGV[1..6] common   ARGV[7] at most this many   ARGV[8] lease_ms
-- Returns the members taken (`<tries>|<id>|<job>`).
local n = tonumber(ARGV[7])
local lease_ms = tonumber(ARGV[8])
if n == nil or n < 1 or n > 1000 or lease_ms == nil or lease_ms < 1 then
  return redis.error_reply('ERR repoll cancel_take: bad arguments')
end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', K.cancels, '-inf', now, 'LIMIT', 0, n)
for _, m in ipairs(due) do
  redis.call('ZADD', K.cancels, now + lease_ms, m)
end
return due
