-- login_attempt.lua: one client's sign-in attempts in a fixed window, counted *before* the
-- password is checked, so parallel guesses cannot all pass a "not yet blocked" check.
--
-- KEYS: <attempts> (the client's counter: {<queue>}:loginfail:<client address>)
-- ARGV[1]  window in ms: the counter lives this long from its first attempt
-- ARGV[2]  "take" (count one attempt) or "give" (return one after a successful sign-in)
-- Returns  the count after this call (0 when there is no counter).
--
-- Validates its arguments before writing. Its one key is under the queue's hash tag (Rust
-- builds it: queue/src/signin.rs). A function of the library that does not read the
-- prelude's common arguments: it needs none of them.

local window = tonumber(ARGV[1])
if not window or window < 1 then
  return redis.error_reply('ERR login_attempt: window must be a positive number of ms')
end
local mode = ARGV[2]
if mode ~= 'take' and mode ~= 'give' then
  return redis.error_reply('ERR login_attempt: mode must be take or give')
end

if mode == 'give' then
  local n = tonumber(redis.call('GET', K.attempts) or '0')
  if n and n > 0 then
    return redis.call('DECR', K.attempts)
  end
  return 0
end

local n = redis.call('INCR', K.attempts)
-- The first attempt starts the window; a counter that somehow lost its TTL gets one back
-- rather than locking the client out forever.
if n == 1 or redis.call('PTTL', K.attempts) < 0 then
  redis.call('PEXPIRE', K.attempts, window)
end
return n
