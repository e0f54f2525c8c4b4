-- retry.lua: admin "run it again now". A dead task returns to ready now with attempts and lease
-- losses reset (otherwise it would die again on its next error); a task waiting for a later
-- poll or backoff is made ready now. Ready and leased tasks are left alone.
-- KEYS: ready ready_bg due retry dead events wakeups
-- KEYS per item: task hist
-- ARGV[1..6] common   ARGV[7] who   ARGV[8] mode ('any' | 'dead')   ARGV[8+i] id i
-- Returns the number of tasks made ready now.
local readyk = K.ready
local bgk = K.ready_bg
local duez = K.due
local retryz = K.retry
local deadz = K.dead
local ekey = K.events
local who = ARGV[7]
local mode = ARGV[8]
local n = #ARGV - 8
if who == nil or (mode ~= 'any' and mode ~= 'dead') or n < 0
  or item_count(KEYS, ITEM_KEYS) ~= n then
  return redis.error_reply('ERR repoll retry: bad arguments')
end
local now = now_ms()
local ids = {}
for i = 1, n do
  local id = ARGV[8 + i]
  local tkey, hkey = item_keys(KEYS, ITEM_KEYS, i)
  local f = redis.call('HMGET', tkey, 's', 'a', 'dr', 'pr')
  local done = false
  if f[1] == 'dead' and redis.call('ZSCORE', deadz, id) then
    redis.call('ZREM', deadz, id)
    redis.call('HDEL', tkey, 'a', 'll', 'dr')
    to_due(tkey, readyk, bgk, duez, retryz, id, f[4], now, 0, now)
    hist(hkey, now, 'retried', 'by admin ' .. who .. ' (was dead: ' .. (f[3] or '') .. ')')
    done = true
  elseif mode == 'any' and f[1] == 'due' then
    local score = redis.call('ZSCORE', duez, id)
    if score and tonumber(score) > now then
      redis.call('ZREM', duez, id)
      redis.call('ZREM', retryz, id)
      to_due(tkey, readyk, bgk, duez, retryz, id, f[4], now, num(f[2], 0), now)
      hist(hkey, now, 'retried', 'by admin ' .. who .. ' (was due at ' .. score .. ')')
      done = true
    end
  end
  if done then
    ids[#ids + 1] = id
  end
end
if #ids > 0 then
  event(ekey, now, 'retried', ids[1], (#ids == 1 and '' or (fmt(#ids) .. ' tasks ')) .. 'by admin ' .. who)
  notify_dash_batch('retried', ids, now)
  wake_workers(K.wakeups, #ids)
end
return #ids
