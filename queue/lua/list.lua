-- list.lua (read-only): one page of a sorted set between two score bounds, ordered by
-- (score, id), oldest first ('asc') or newest first ('desc'). The cursor is the (score, id) of
-- the last item returned, so pages stay stable while members come and go: the next page
-- starts just past that position even if the member itself has left (binary search over the
-- members sharing its score), never from a numeric offset.
-- KEYS: <zset> (the zset listed)
-- ARGV[1..6] common   ARGV[7] min bound ('-inf' | 'after_now')   ARGV[8] max bound
-- ('now' | '+inf')   ARGV[9] cursor score ('' = first page)   ARGV[10] cursor id
-- ARGV[11] limit (1..1000)   ARGV[12] order ('asc' | 'desc')
-- Returns {total, has_more (0/1), id1, score1, id2, score2, ...} in the requested order.
local z = K.zset
local minb = ARGV[7]
local maxb = ARGV[8]
local cscore = ARGV[9]
local cid = ARGV[10]
local limit = tonumber(ARGV[11])
local order = ARGV[12]
if limit == nil or limit < 1 or limit > 1000 or cid == nil or cscore == nil
  or (order ~= 'asc' and order ~= 'desc') then
  return redis.error_reply('ERR repoll list: bad arguments')
end
if minb ~= '-inf' and minb ~= 'after_now' then
  return redis.error_reply('ERR repoll list: bad min')
end
if maxb ~= 'now' and maxb ~= '+inf' then
  return redis.error_reply('ERR repoll list: bad max')
end
local cs = nil
if cscore ~= '' then
  cs = tonumber(cscore)
  if cs == nil then return redis.error_reply('ERR repoll list: bad cursor') end
end

-- The bounds as a rank interval [lo, hi): members due by now are ranks [0, ZCOUNT(-inf, now)).
local now = now_ms()
local lo, hi = 0, redis.call('ZCARD', z)
if minb == 'after_now' or maxb == 'now' then
  local due_now = redis.call('ZCOUNT', z, '-inf', fmt(now))
  if minb == 'after_now' then lo = due_now end
  if maxb == 'now' then hi = due_now end
end
local total = math.max(hi - lo, 0)

-- Rank of the first member sorting after the cursor ('asc'), or of the cursor position itself
-- ('desc': everything before it is still to come).
local function cursor_rank(after)
  local cur = redis.call('ZSCORE', z, cid)
  if cur and tonumber(cur) == cs then
    local r = redis.call('ZRANK', z, cid)
    if after then return r + 1 end
    return r
  end
  local a = redis.call('ZCOUNT', z, '-inf', '(' .. fmt(cs))
  local b = redis.call('ZCOUNT', z, '-inf', fmt(cs))
  -- first index in [a, b) whose member sorts after cid (cid itself is absent)
  while a < b do
    local mid = math.floor((a + b) / 2)
    local m = redis.call('ZRANGE', z, mid, mid)[1]
    if m and m <= cid then a = mid + 1 else b = mid end
  end
  return a
end

local out = { total, 0 }
local first, last
if order == 'asc' then
  first = lo
  if cs then first = math.max(first, cursor_rank(true)) end
  last = math.min(first + limit, hi) - 1
  if first + limit < hi then out[2] = 1 end
else
  last = hi - 1
  if cs then last = math.min(last, cursor_rank(false) - 1) end
  first = math.max(last - limit + 1, lo)
  if first > lo then out[2] = 1 end
end
if first > last then
  out[2] = 0
  return out
end
local rows = redis.call('ZRANGE', z, first, last, 'WITHSCORES')
if order == 'asc' then
  for i = 1, #rows do out[#out + 1] = rows[i] end
else
  for i = #rows - 1, 1, -2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
  end
end
return out
