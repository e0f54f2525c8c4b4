-- fair_sync.lua: recount the leases each tenant holds from the lease zset itself, so the
-- per-tenant cap (prelude/fair.lua) heals from any drift of its running counts (a
-- record deleted while leased, a script of an older version). Run by the reaper of a queue
-- with a per-tenant cap. Skipped (returns -1) above max_n leases: the scan would be long, and
-- the running counts are kept by every lease end anyway.
-- Undeclared keys (read only, derived from ARGV[6], same hash tag): the task hashes
-- {q}:t:<id> of the leased ids, all read before the first write.
-- KEYS: lease fairc
-- ARGV[1..6] common   ARGV[7] max_n (1..10000)
-- Returns the number of tenants holding leases, or -1 when skipped.
local leasez = K.lease
local fairc = K.fairc
local max_n = tonumber(ARGV[7])
if max_n == nil or max_n < 1 or max_n > 10000 then
  return redis.error_reply('ERR repoll fair_sync: bad arguments')
end
if redis.call('ZCARD', leasez) > max_n then return -1 end
local ids = redis.call('ZRANGE', leasez, 0, -1)
local held = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', PREFIX .. 't:' .. id, 's', 'tn')
  if f[1] == 'leased' and f[2] and f[2] ~= '' then count_in(held, f[2]) end
end
redis.call('DEL', fairc)
if #held > 0 then
  local args = {}
  for _, tn in ipairs(held) do
    args[#args + 1] = tn
    args[#args + 1] = fmt(held[tn])
  end
  redis.call('HSET', fairc, unpack(args))
end
return #held
