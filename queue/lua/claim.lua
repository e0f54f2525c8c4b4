-- claim.lua: phase two of claim. Leases up to max_n of the given candidates, re-checking each
-- one (still a due member, due now, record in state 'due') because another claimer may have
-- taken it since the peek. Each claimed task gets a fresh fencing token from the INCR counter.
-- KEYS[1] due zset   KEYS[2] lease zset   KEYS[3] retry zset   KEYS[4] token counter
-- KEYS[5] paused flag   KEYS[6] events stream
-- KEYS[5+2i] task hash of candidate i   KEYS[6+2i] history of candidate i   (i = 1..n)
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
  or n < 0 or #KEYS ~= 6 + 2 * n then
  return redis.error_reply('ERR repoll claim: bad arguments')
end
if redis.call('EXISTS', paused) == 1 then
  return {}
end

local now = now_ms()
local deadline = now + lease_ms
local out = {}
-- Tokens: one INCRBY per call reserves a block; unused ones are simply skipped (tokens only
-- need to be strictly increasing, not dense).
local next_token = nil
local last_token = 0
for i = 1, n do
  if #out >= max_n then break end
  local id = ARGV[8 + i]
  local tkey = KEYS[5 + 2 * i]
  local hkey = KEYS[6 + 2 * i]
  local score = redis.call('ZSCORE', duez, id)
  if score and tonumber(score) <= now then
    local f = redis.call('HMGET', tkey, 'state', 'query', 'payload', 'attempts', 'polls',
      'max_attempts', 'created', 'deadline')
    if f[1] == 'due' then
      if next_token == nil then
        last_token = redis.call('INCRBY', tokenk, max_n)
        next_token = last_token - max_n + 1
      end
      local token = next_token
      next_token = next_token + 1
      redis.call('ZREM', duez, id)
      if num(f[4], 0) > 0 then
        -- the retry zset only ever holds due tasks with attempts > 0
        redis.call('ZREM', retryz, id)
      end
      redis.call('ZADD', leasez, deadline, id)
      redis.call('HSET', tkey, 'state', 'leased', 'token', fmt(token), 'worker', worker,
        'lease_deadline', fmt(deadline), 'updated', fmt(now))
      hist(hkey, now, 'claimed', 'by ' .. worker .. ' token ' .. fmt(token))
      notify_task(id, 'claimed', now)
      out[#out + 1] = { id, f[2], f[3], token, num(f[4], 0), num(f[5], 0), num(f[6], 0),
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
  event(ekey, now, 'claimed', out[1][1], fmt(#out) .. ' by ' .. worker)
  notify_dash('claimed', out[1][1], now)
end
return out
