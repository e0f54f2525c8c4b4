-- prelude/breaker.lua: the upstream's circuit breaker (used by the claims and completions).

-- ---------------------------------------------------------------------------------------------
-- The circuit breaker of the upstream (ARCHITECTURE.md, "Circuit breaker"): a hash at
-- K.breaker, absent while closed (so a closed breaker costs no command: claim_read asks
-- EXISTS of the pause flag, the breaker and the fair zset in one call). Fields: st ('open' | 'half'),
-- since (opened at), to (open: end of the cool-down), probe (half: the task id of the one
-- probe), pd (half: the probe's lease deadline), why (the error that opened it), by ('auto' or
-- the admin who opened it by hand). Opened by fail.lua (an error rate over the last minute),
-- half-open by the first claim after the cool-down (that claim takes one task, the probe),
-- closed by the probe's success (complete / reschedule) or by hand; a failed probe reopens it.
local function breaker_read(K)
  local b = redis.call('HMGET', K.breaker, 'st', 'to', 'probe', 'pd')
  if not b[1] then return nil end
  return { st = b[1], to = num(b[2], 0), probe = b[3] or '', pd = num(b[4], 0) }
end

local function breaker_notice(kind, at)
  redis.call('PUBLISH', CH_DASH, '{"kind":"' .. kind .. '","id":"","at_ms":' .. fmt(at) .. '}')
end

-- Closes the breaker and wakes a worker per task ready now (they waited for it). The errors
-- of the upstream counted this minute and the last ('uerr', read by fail.lua only) are
-- forgotten: kept, they would reopen it at the first error after a successful probe, since
-- no call is made while it is open to outweigh them.
local function breaker_close(K, now, why)
  redis.call('DEL', K.breaker)
  local minute = now - (now % 60000)
  redis.call('HDEL', K.tp, fmt(minute) .. ':uerr', fmt(minute - 60000) .. ':uerr')
  event(K.events, now, 'breaker', '', 'closed: ' .. why)
  breaker_notice('breaker_closed', now)
  wake_workers(K.wakeups, redis.call('LLEN', K.ready) + redis.call('LLEN', K.ready_bg)
    + redis.call('ZCOUNT', K.due, '-inf', now))
end

-- Closes the breaker if `br` (as read before this script's writes) is half-open and the probe
-- is among `ids`, the tasks this call saw succeed (a final answer or a poll).
local function breaker_succeeded(K, br, ids, now)
  if br == nil or br.st ~= 'half' then return end
  for _, id in ipairs(ids) do
    if id == br.probe then
      breaker_close(K, now, 'probe ' .. id .. ' succeeded')
      return
    end
  end
end

