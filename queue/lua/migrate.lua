-- migrate.lua: bring one task from the first layout (long field names, every field written,
-- the result a hash, partial data and a deferred claim entry inside the record) to the lean
-- one (prelude.lua's record layout). Idempotent: a task already in the lean layout is left as
-- it is. Due tasks stay in the due zset: a claim takes due members whose time has come.
-- KEYS: task result partial
-- ARGV[1..6] common   ARGV[7] id
-- Returns {record: 'migrated'|'lean'|'none', result: 'migrated'|'lean'|'none'}
local tkey = K.task
local rkey = K.result
local pkey = K.partial
local id = ARGV[7]
if id == nil or id == '' then
  return redis.error_reply('ERR repoll migrate: bad arguments')
end
-- Reads first.
local ttype = redis.call('TYPE', tkey)['ok']
local old = nil
if ttype == 'hash' and redis.call('HEXISTS', tkey, 'state') == 1 then
  old = redis.call('HGETALL', tkey)
end
local rtype = redis.call('TYPE', rkey)['ok']
local oldr = nil
local rttl = -1
if rtype == 'hash' then
  oldr = redis.call('HGETALL', rkey)
  rttl = redis.call('PTTL', rkey)
end

local out = { 'none', 'none' }
if ttype == 'hash' and not old then out[1] = 'lean' end
if rtype == 'string' then out[2] = 'lean' end

if old then
  local f = {}
  for i = 1, #old, 2 do f[old[i]] = old[i + 1] end
  local function nz(v) return v ~= nil and v ~= '' and v ~= '0' end
  local rec = { 'q', f.query or '', 's', f.state, 'c', f.created or '0' }
  local function put(k, v) rec[#rec + 1] = k; rec[#rec + 1] = v end
  if nz(f.updated) and f.updated ~= f.created then put('u', f.updated) end
  if nz(f.attempts) then put('a', f.attempts) end
  if nz(f.polls) then put('p', f.polls) end
  if nz(f.max_attempts) then put('m', f.max_attempts) end
  if nz(f.deadline) then put('dl', f.deadline) end
  if nz(f.token) then put('tk', f.token) end
  if f.state == 'leased' then
    put('w', f.worker or '')
    put('ld', f.lease_deadline or '0')
  end
  if nz(f.last_error) then put('e', f.last_error) end
  if f.state == 'dead' and nz(f.dead_reason) then put('dr', f.dead_reason) end
  if nz(f.lease_losses) then put('ll', f.lease_losses) end
  if nz(f.payload) then put('pl', f.payload) end
  redis.call('DEL', tkey)
  redis.call('HSET', tkey, unpack(rec))
  if f.has_partial == '1' and f.partial then redis.call('SET', pkey, f.partial) end
  -- `hpend` (the first layout's deferred claim entry of a leased task) is dropped: the lean
  -- layout shows a live lease from the record and writes its entry when the lease ends.
  out[1] = 'migrated'
end
if oldr then
  local f = {}
  for i = 1, #oldr, 2 do f[oldr[i]] = oldr[i + 1] end
  local q = f.query or ''
  local packed = string.format('%d,%d,%d,0,0,0,%d\n', num(f.completed, 0), num(f.created, 0),
    num(f.polls, 0), #q) .. q .. (f.data or '')
  redis.call('DEL', rkey)
  if rttl > 0 then
    redis.call('SET', rkey, packed, 'PX', rttl)
  else
    redis.call('SET', rkey, packed)
  end
  out[2] = 'migrated'
end
return out
