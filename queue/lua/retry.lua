-- retry.lua: admin "run it again now". A dead task returns to ready now with attempts and lease
-- losses reset (otherwise it would die again on its next error); a task waiting for a later
-- poll or backoff is made ready now. Ready and leased tasks are left alone.
-- KEYS[1] ready list   KEYS[2] background ready list   KEYS[3] due zset   KEYS[4] retry zset
-- KEYS[5] dead zset   KEYS[6] events stream
-- KEYS[5+2i] task hash i   KEYS[6+2i] history i   (i = 1..n)   KEYS[7+2n] (last) wake-up list
-- ARGV[1..6] common   ARGV[7] who   ARGV[8] mode ('any' | 'dead')   ARGV[8+i] id i
-- Returns the number of tasks made ready now.
local readyk = KEYS[1]
local bgk = KEYS[2]
local duez = KEYS[3]
local retryz = KEYS[4]
local deadz = KEYS[5]
local ekey = KEYS[6]
local who = ARGV[7]
local mode = ARGV[8]
local n = #ARGV - 8
if who == nil or (mode ~= 'any' and mode ~= 'dead') or n < 0 or #KEYS ~= 7 + 2 * n then
  return redis.error_reply('ERR repoll retry: bad arguments')
end
local now = now_ms()
local ids = {}
for i = 1, n do
  local id = ARGV[8 + i]
  local tkey = KEYS[5 + 2 * i]
  local hkey = KEYS[6 + 2 * i]
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
  wake_workers(KEYS[#KEYS], #ids)
end
return #ids
