-- peek_expired.lua (read-only): phase one of reap — leases past their deadline, oldest first.
-- KEYS: lease
-- ARGV[1..6] common   ARGV[7] max_n
-- Returns {id1, deadline1, id2, deadline2, ...}
local leasez = K.lease
local max_n = tonumber(ARGV[7])
if max_n == nil or max_n < 1 then
  return redis.error_reply('ERR repoll peek_expired: bad max_n')
end
return redis.call('ZRANGEBYSCORE', leasez, '-inf', now_ms(), 'WITHSCORES', 'LIMIT', 0, max_n)
