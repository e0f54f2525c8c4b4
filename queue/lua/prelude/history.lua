-- prelude/history.lua: per-task history, the event stream, dashboard messages and wake-ups.

-- Per-task capped history: "at|kind|detail". Only what cannot be derived is stored: the
-- enqueue, the live lease and the completion are shown from the record and the result
-- (read.rs), so a task that goes enqueue -> polls -> done writes no history at all in the
-- default level. hist() is for transitions an operator needs later (errors, lease losses,
-- deaths, admin actions): written in 'full' and 'transitions'. hist_routine() is for claims and
-- polls: 'full' only. LTRIM only when over the cap (LPUSH returns the length). An entry's
-- detail is at most DETAIL_MAX bytes (prelude.lua), so a capped history is capped in bytes too.
local function push_hist(hkey, at, kind, detail)
  local len = redis.call('LPUSH', hkey, fmt(at) .. '|' .. kind .. '|' .. cut(detail, DETAIL_MAX))
  if len > HIST_CAP then
    redis.call('LTRIM', hkey, 0, HIST_CAP - 1)
  end
end

local function hist(hkey, at, kind, detail)
  if HIST_LEVEL ~= 'off' then push_hist(hkey, at, kind, detail) end
end

local function hist_routine(hkey, at, kind, detail)
  if HIST_LEVEL == 'full' then push_hist(hkey, at, kind, detail) end
end

-- The entry of a claim that ends in a transition (error, release, lost lease), written when
-- the lease ends: at the 'transitions' level the claim itself writes nothing ('full' pushed it
-- when it happened). `at` is the claim's time (the record's `u` while leased).
local function hist_claim(hkey, at, detail)
  if HIST_LEVEL == 'transitions' then push_hist(hkey, at, 'claimed', detail) end
end

-- The detail of a completion (read.rs derives the same words from the result at the levels
-- that do not store it): the time to result counted from the task's creation, and the last
-- call's own latency.
local function completed_detail(who, token, ttr, latency)
  return 'by ' .. who .. ' token ' .. token .. ': result ' .. fmt(math.max(ttr, 0))
    .. ' ms after the enqueue (last call ' .. latency .. ' ms)'
end

-- Capped global event stream for the dashboard (one entry per batch on the hot path), each
-- detail at most DETAIL_MAX bytes.
local function event(ekey, at, kind, id, detail)
  redis.call('XADD', ekey, 'MAXLEN', '~', EVENTS_CAP, '*',
    'at', fmt(at), 'kind', kind, 'id', id, 'detail', cut(detail, DETAIL_MAX))
end

-- JSON built by hand: cheaper than cjson on the hot path. Safe because kinds are literals
-- and ids are task ids (hex, checked by the Rust side before any script runs).
local function wake_msg(kind, id, at)
  return '{"kind":"' .. kind .. '","id":"' .. id .. '","at_ms":' .. fmt(at) .. '}'
end

-- The dashboard channel carries every state change; the web process derives each task's live
-- page from it (server/src/live_hub.rs), so there is no per-task channel to publish on.
local function notify_dash(kind, id, at)
  redis.call('PUBLISH', CH_DASH, wake_msg(kind, id, at))
end

-- Wake-ups (ARCHITECTURE.md, "Wake-ups"): one entry in the wake-up list per task made ready
-- now. An idle worker process blocks on BLPOP of that list, and Redis hands each entry to one
-- blocked client, so one unit of new work wakes one worker, not every idle one (as a Pub/Sub
-- message would). Claims remove as many entries as tasks they take (claim_apply), so the list
-- tracks ready work nobody has claimed yet; it is capped at WAKE_CAP (more entries than idle
-- workers wake nobody more). Missing entries cost latency only: workers also sleep at most 1 s.
local function wake_workers(wkey, n)
  if n < 1 then return end
  local add = math.min(n, WAKE_CAP - redis.call('LLEN', wkey))
  if add < 1 then return end
  local t = {}
  for i = 1, add do t[i] = '1' end
  redis.call('RPUSH', wkey, unpack(t))
end

-- One dashboard message for a batch: `kind`/`id` as for one task (id = the first), plus `ids`
-- with every id when there is more than one.
local function notify_dash_batch(kind, ids, at)
  if #ids == 1 then
    notify_dash(kind, ids[1], at)
  elseif #ids > 1 then
    redis.call('PUBLISH', CH_DASH, '{"kind":"' .. kind .. '","id":"' .. ids[1] .. '","ids":["'
      .. table.concat(ids, '","') .. '"],"at_ms":' .. fmt(at) .. '}')
  end
end
