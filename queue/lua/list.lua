-- list.lua (read-only): one page of a sorted set between two score bounds, ordered by
-- (score, id). The cursor is the (score, id) of the last item returned, so pages stay stable
-- while members come and go: we restart just after that position even if the member itself
-- has left (binary search over the members sharing its score), never from a numeric offset.
-- KEYS[1] the zset
-- ARGV[1..5] common   ARGV[6] min bound ('-inf' | 'now' | 'after_now')   ARGV[7] max bound
-- ('now' | '+inf')   ARGV[8] cursor score ('' = first page)   ARGV[9] cursor id   ARGV[10] limit
-- Returns {total, has_more (0/1), id1, score1, id2, score2, ...}
local z = KEYS[1]
local minb = ARGV[6]
local maxb = ARGV[7]
local cscore = ARGV[8]
local cid = ARGV[9]
local limit = tonumber(ARGV[10])
if limit == nil or limit < 1 or limit > 1000 or cid == nil or cscore == nil then
  return redis.error_reply('ERR repoll list: bad arguments')
end
local now = now_ms()
local min_arg, max_arg
if minb == '-inf' then min_arg = '-inf'
elseif minb == 'after_now' then min_arg = '(' .. fmt(now)
else return redis.error_reply('ERR repoll list: bad min') end
if maxb == '+inf' then max_arg = '+inf'
elseif maxb == 'now' then max_arg = fmt(now)
else return redis.error_reply('ERR repoll list: bad max') end

local total = redis.call('ZCOUNT', z, min_arg, max_arg)
-- rank of the first member inside the min bound
local start = 0
if min_arg ~= '-inf' then start = redis.call('ZCOUNT', z, '-inf', fmt(now)) end
if cscore ~= '' then
  local cs = tonumber(cscore)
  if cs == nil then return redis.error_reply('ERR repoll list: bad cursor') end
  local pos
  local cur = redis.call('ZSCORE', z, cid)
  if cur and tonumber(cur) == cs then
    pos = redis.call('ZRANK', z, cid) + 1
  else
    local lo = redis.call('ZCOUNT', z, '-inf', '(' .. fmt(cs))
    local hi = redis.call('ZCOUNT', z, '-inf', fmt(cs))
    -- first index in [lo, hi) whose member sorts after cid
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local m = redis.call('ZRANGE', z, mid, mid)[1]
      if m and m <= cid then lo = mid + 1 else hi = mid end
    end
    pos = lo
  end
  if pos > start then start = pos end
end
local rows = redis.call('ZRANGE', z, start, start + limit, 'WITHSCORES')
local out = { total, 0 }
local maxn = (max_arg == '+inf') and math.huge or now
local taken = 0
for i = 1, #rows, 2 do
  local s = tonumber(rows[i + 1])
  if s > maxn then break end
  if taken == limit then out[2] = 1 break end
  out[#out + 1] = rows[i]
  out[#out + 1] = rows[i + 1]
  taken = taken + 1
end
return out
