-- retry.lua: admin "run it again now". A dead task returns to due now with attempts and lease
-- losses reset (otherwise it would die again on its next error); a task waiting for a later
-- poll or backoff is made due now. Ready and leased tasks are left alone.
-- KEYS[1] due zset   KEYS[2] retry zset   KEYS[3] dead zset   KEYS[4] events stream
-- KEYS[3+2i] task hash i   KEYS[4+2i] history i   (i = 1..n)
-- ARGV[1..5] common   ARGV[6] who   ARGV[7] mode ('any' | 'dead')   ARGV[7+i] id i
-- Returns the number of tasks made due now.
local duez = KEYS[1]
local retryz = KEYS[2]
local deadz = KEYS[3]
local ekey = KEYS[4]
local who = ARGV[6]
local mode = ARGV[7]
local n = #ARGV - 7
if who == nil or (mode ~= 'any' and mode ~= 'dead') or n < 0 or #KEYS ~= 4 + 2 * n then
  return redis.error_reply('ERR repoll retry: bad arguments')
end
local now = now_ms()
local count = 0
local first = nil
for i = 1, n do
  local id = ARGV[7 + i]
  local tkey = KEYS[3 + 2 * i]
  local hkey = KEYS[4 + 2 * i]
  local f = redis.call('HMGET', tkey, 'state', 'attempts', 'dead_reason')
  local done = false
  if f[1] == 'dead' and redis.call('ZSCORE', deadz, id) then
    redis.call('ZREM', deadz, id)
    redis.call('HSET', tkey, 'attempts', '0', 'lease_losses', '0', 'dead_reason', '')
    to_due(tkey, duez, retryz, id, now, 0, now)
    hist(hkey, now, 'retried', 'by admin ' .. who .. ' (was dead: ' .. (f[3] or '') .. ')')
    done = true
  elseif mode == 'any' and f[1] == 'due' then
    local score = redis.call('ZSCORE', duez, id)
    if score and tonumber(score) > now then
      to_due(tkey, duez, retryz, id, now, num(f[2], 0), now)
      hist(hkey, now, 'retried', 'by admin ' .. who .. ' (was due at ' .. score .. ')')
      done = true
    end
  end
  if done then
    count = count + 1
    first = first or id
    event(ekey, now, 'retried', id, 'by admin ' .. who)
    notify_task(id, 'retried', now)
  end
end
if count > 0 then
  notify_dash('retried', first, now)
  notify_wake('retried', first, now)
end
return count
