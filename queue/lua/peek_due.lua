-- peek_due.lua (read-only): candidate ids for claim, oldest due first. Phase one of claim:
-- claim.lua needs the tasks' keys in KEYS, so it can only act on ids found beforehand.
-- KEYS[1] due zset   KEYS[2] paused flag
-- ARGV[1..5] common   ARGV[6] window (how many candidates)
-- Returns a list of ids due now (empty while paused).
local duez = KEYS[1]
local paused = KEYS[2]
local window = tonumber(ARGV[6])
if window == nil or window < 1 then
  return redis.error_reply('ERR repoll peek_due: bad window')
end
if redis.call('EXISTS', paused) == 1 then
  return {}
end
return redis.call('ZRANGEBYSCORE', duez, '-inf', now_ms(), 'LIMIT', 0, window)
