-- breaker.lua: an admin opens the upstream's circuit breaker by hand (claims stop until it is
-- closed or ARGV[9] ms pass, then one probe goes as after an automatic opening), or closes it
-- (claims resume at once; workers are woken for the tasks ready now). See the prelude.
-- Mode 'mirror' (partitioned queues, partition.rs): another partition's breaker opened by
-- itself; this partition's opens for the rest of that cool-down, as by an automatic opening
-- (by 'auto'), unless it is open or half-open already.
-- KEYS: breaker events ready ready_bg due wakeups tp tpmin (an opening by hand is counted
-- per minute as 'breaker_opened', as fail.lua counts an automatic one: the charts mark both)
-- ARGV[1..6] common   ARGV[7] mode ('open' | 'close' | 'mirror')   ARGV[8] who (mirror: the
-- partition that opened)   ARGV[9] open for ms
-- Returns 1 if the state changed, 0 if it already was so (closing a closed breaker, mirroring
-- onto a breaker not closed).
local mode = ARGV[7]
local who = ARGV[8]
local for_ms = tonumber(ARGV[9])
if (mode ~= 'open' and mode ~= 'close' and mode ~= 'mirror') or who == nil or who == '' or for_ms == nil
  or for_ms < 1 then
  return redis.error_reply('ERR repoll breaker: bad arguments')
end
local now = now_ms()
local open = redis.call('EXISTS', K.breaker) == 1
if mode == 'mirror' then
  if open then return 0 end
  local to = now + for_ms
  redis.call('HSET', K.breaker, 'st', 'open', 'since', fmt(now), 'to', fmt(to), 'probe', '',
    'pd', '0', 'why', 'opened in ' .. who, 'by', 'auto')
  event(K.events, now, 'breaker', '', 'open: ' .. who .. ' opened, until ' .. fmt(to))
  breaker_notice('breaker_open', now)
  return 1
end
if mode == 'open' then
  local to = now + for_ms
  redis.call('HSET', K.breaker, 'st', 'open', 'since', fmt(now), 'to', fmt(to), 'probe', '',
    'pd', '0', 'why', 'opened by hand', 'by', who)
  event(K.events, now, 'breaker', '', 'open by admin ' .. who .. ' until ' .. fmt(to))
  breaker_notice('breaker_open', now)
  bump(K.tp, K.tpmin, now, 'breaker_opened', 1)
  return 1
end
if not open then return 0 end
breaker_close(K, now, 'by admin ' .. who)
return 1
