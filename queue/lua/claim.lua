-- claim.lua: phase two of claim. Leases up to max_n of the given candidates, re-checking each
-- one (still a due member, due now, record in state 'due') because another claimer may have
-- taken it since the peek. Each claimed task gets a fresh fencing token from the INCR counter.
-- Cost per claimed task: one HMGET, one HSET, one PUBLISH. Per call: ZMSCORE of all
-- candidates, INCRBY, one variadic ZREM (due, and retry if needed), one variadic ZADD (lease),
-- one XADD and one dashboard PUBLISH. The "claimed" history entry is stored in the record's
-- `hpend` field and pushed to the history list by the script that ends the lease (see
-- pending() in prelude.lua); read.rs shows it while the task is leased.
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] retry zset   KEYS[4] token counter
-- KEYS[5] paused flag   KEYS[6] events stream   KEYS[6+i] task hash of candidate i (i = 1..n)
-- ARGV[1..5] common   ARGV[6] worker   ARGV[7] max_n   ARGV[8] lease_ms   ARGV[8+i] candidate id i
-- Returns {{id, query, payload, token, attempts, polls, max_attempts, created, deadline,
--           lease_deadline}, ...}
local duez = KEYS[1]
local leasez = KEYS[2]
local retryz = KEYS[3]
local tokenk = KEYS[4]
local paused = KEYS[5]
local ekey = KEYS[6]
local worker = ARGV[6]
local max_n = tonumber(ARGV[7])
local lease_ms = tonumber(ARGV[8])
local n = #ARGV - 8
if worker == nil or max_n == nil or max_n < 1 or lease_ms == nil or lease_ms < 1
  or n < 0 or #KEYS ~= 6 + n then
  return redis.error_reply('ERR repoll claim: bad arguments')
end
if n == 0 or redis.call('EXISTS', paused) == 1 then
  return {}
end

local now = now_ms()
local now_s = fmt(now)
local deadline = now + lease_ms
local deadline_s = fmt(deadline)
local scores = redis.call('ZMSCORE', duez, unpack(ARGV, 9, 8 + n))
local out = {}
local ids = {}
local lease_args = {}
local retry_ids = {}
-- Tokens: one INCRBY per call reserves a block; unused ones are simply skipped (tokens only
-- need to be strictly increasing, not dense).
local next_token = nil
local hprefix = now_s .. '|claimed|by ' .. worker .. ' token '
local mprefix = '{"kind":"claimed","id":"'
local msuffix = '","at_ms":' .. now_s .. '}'
for i = 1, n do
  if #out >= max_n then break end
  local score = scores[i]
  if score and tonumber(score) <= now then
    local id = ARGV[8 + i]
    local tkey = KEYS[6 + i]
    local f = redis.call('HMGET', tkey, 'state', 'query', 'payload', 'attempts', 'polls',
      'max_attempts', 'created', 'deadline')
    if f[1] == 'due' then
      if next_token == nil then
        next_token = redis.call('INCRBY', tokenk, max_n) - max_n + 1
      end
      local token = next_token
      next_token = next_token + 1
      local token_s = fmt(token)
      local attempts = num(f[4], 0)
      if attempts > 0 then
        -- the retry zset only ever holds due tasks with attempts > 0
        retry_ids[#retry_ids + 1] = id
      end
      redis.call('HSET', tkey, 'state', 'leased', 'token', token_s, 'worker', worker,
        'lease_deadline', deadline_s, 'updated', now_s, 'hpend', hprefix .. token_s)
      redis.call('PUBLISH', CH_TASK .. id, mprefix .. id .. msuffix)
      ids[#ids + 1] = id
      lease_args[#lease_args + 1] = deadline_s
      lease_args[#lease_args + 1] = id
      out[#out + 1] = { id, f[2], f[3], token, attempts, num(f[5], 0), num(f[6], 0),
        num(f[7], 0), num(f[8], 0), deadline }
    elseif f[1] == false then
      -- A due member without a record can never be claimed; drop it so it stops
      -- shadowing real work at the head of the due set.
      redis.call('ZREM', duez, id)
      redis.call('ZREM', retryz, id)
      event(ekey, now, 'corrupt', id, 'due member without task record removed')
    end
  end
end
if #out > 0 then
  redis.call('ZREM', duez, unpack(ids))
  if #retry_ids > 0 then
    redis.call('ZREM', retryz, unpack(retry_ids))
  end
  redis.call('ZADD', leasez, unpack(lease_args))
  event(ekey, now, 'claimed', ids[1], fmt(#out) .. ' by ' .. worker)
  notify_dash_batch('claimed', ids, now)
end
return out
