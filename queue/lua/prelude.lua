-- prelude.lua: shared helpers, at the top of the one Lua library (scripts.rs builds it; Redis
-- has no `require`), followed by the helpers by concern in prelude/*.lua (PRELUDE_PARTS in
-- scripts.rs). Every function but login_attempt receives the same six leading ARGV so these
-- helpers need no per-call wiring:
--   ARGV[1] history_cap   ARGV[2] events_cap   ARGV[3] dashboard channel
--   ARGV[4] history level ('full' | 'transitions' | 'off')   ARGV[5] wake-up token cap
--   ARGV[6] per-task key prefix ('{name}:'), used only by the scripts whose header says so
-- Script-specific ARGV start at ARGV[7].
--
-- Keys: each function declares its KEYS by name in its header (`-- KEYS: ...`, key_decl.rs); the
-- library checks their count and hands the body `K` (K.ready, K.task, ...) and, for a batch
-- function, `ITEM_KEYS` for item_keys() below. Every key a script touches is declared, except
-- where a header says "undeclared": claims
-- (claim.lua and the claim-next part of complete / reschedule / fail), stats and the queued purge
-- find their task ids in a list or zset inside the script, so they derive the record key from
-- the prefix (PREFIX .. 't:' .. id). Those keys share the queue's hash tag, so Redis Cluster
-- serves them from the same slot; and because a slot migration can refuse an undeclared key
-- part-way, every such script reads all it needs before its first write and creates no
-- undeclared key (it only updates records it has just read).
--
-- Record layout (ARCHITECTURE.md has the table): a compact hash with short field names, and
-- a field is written only when it differs from its default, so the hash stays small and
-- listpack-encoded:
--   q query   s state (due | leased | dead)   c created   u last state change (omitted = c)
--   pr priority ('bg'; omitted = interactive)   a attempts   p polls   m max_attempts
--   dl whole-life deadline   tk token   w worker   ld lease deadline   e last error
--   dr dead reason   ll lease losses   pl payload   tn tenant (who asked; omitted = none)
--   rf '1' on a refresh (a result was stored when it was made: enqueue.lua)
--   fp first poll answer   lp last poll answer   lc last ended claim's time   lw its worker
--   es last failed call's HTTP status   ed its duration ms   eb its body's start (fail.lua)
--   (omitted numbers are 0, strings empty)
-- The common ARGV of the call being served. The library's helpers are built once when it loads
-- (not per call), so these are upvalues that read_common() sets at the start of every call:
-- Redis runs one call at a time, and each call sets all six before any helper reads them.
local HIST_CAP, EVENTS_CAP, CH_DASH, HIST_LEVEL, WAKE_CAP, PREFIX

-- read_common(ARGV): reads and checks ARGV[1..6]. Returns an error reply when they are bad
-- (the call must return it before writing anything), nil otherwise.
local function read_common(ARGV)
  HIST_CAP = tonumber(ARGV[1])
  EVENTS_CAP = tonumber(ARGV[2])
  CH_DASH = ARGV[3]
  HIST_LEVEL = ARGV[4]
  WAKE_CAP = tonumber(ARGV[5])
  PREFIX = ARGV[6]
  if not HIST_CAP or HIST_CAP < 1 or not EVENTS_CAP or EVENTS_CAP < 1 or CH_DASH == nil
    or (HIST_LEVEL ~= 'full' and HIST_LEVEL ~= 'transitions' and HIST_LEVEL ~= 'off')
    or not WAKE_CAP or WAKE_CAP < 1 or PREFIX == nil or PREFIX == '' then
    return redis.error_reply('ERR repoll: bad common ARGV')
  end
  return nil
end

-- Milliseconds from the Redis clock, so every client agrees on "now".
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as plain decimal strings (Lua's tostring could switch to exponent notation).
local function fmt(n)
  return string.format('%d', n)
end

local function num(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end

-- Text that came from outside (an upstream's error, a history detail) cut to at most `max`
-- bytes, on a UTF-8 character boundary, ending in '...' (U+2026) when cut. The last line of
-- defence: the worker already keeps an upstream's message to 200 characters, so only a
-- caller that did not (an older or foreign client) reaches these limits. Continuation bytes
-- are 0x80..0xBF: the kept part ends before a byte that starts a character.
local function cut(s, max)
  if #s <= max then return s end
  local n = max - 3
  while n > 0 do
    local b = string.byte(s, n + 1)
    if b < 128 or b >= 192 then break end
    n = n - 1
  end
  return string.sub(s, 1, n) .. '\226\128\166'
end

-- The most bytes of a task's last error (record field `e`, and the breaker's `why`): room for
-- the worker's longest (a 300-character call, the error, a 200-character message of
-- multi-byte characters), while a record holding one stays about a kilobyte.
local ERROR_MAX = 1200
-- The most bytes of one history entry's or event's detail: an error and what followed it
-- ("-> retry at ... (attempt n)").
local DETAIL_MAX = 1300
-- The most bytes of a failed call's answer body kept with its error (record field `eb`): enough
-- to read what the upstream said, small enough that a record holding one stays small.
local BODY_MAX = 512

-- The number of items in a batch call's KEYS (its header's "KEYS per item"; the prologue has
-- checked that they divide evenly).
local function item_count(KEYS, IK)
  return (#KEYS - IK.first + 1) / IK.width
end

-- The declared keys of item i (1-based) of a batch call, in the header's per-item order.
local function item_keys(KEYS, IK, i)
  local s = IK.first + (i - 1) * IK.width
  return unpack(KEYS, s, s + IK.width - 1)
end
