"""The queue's own layout in Redis, written straight by the benches: filling millions of stored
results or tasks through the queue's scripts would take longer than the measurement.

Writes RESP commands to standard output for `redis-cli --pipe`. The layouts are the queue's
(keep them in step):
- a stored result: `{tag}:r:<id>` holding the packed result (queue/src/decode.rs
  `packed_result`: "completed,created,polls,token,latency_ms,worker_len,query_len,flags" then a
  newline, the worker, the query and the data), with its time to live, and the results index
  `{tag}:results` (score: completed);
- a task: its record hash `{tag}:t:<id>` (queue/lua/prelude.lua, "Record layout") and its
  entry in the list or zset of its state.
"""

import hashlib
import sys

_write = sys.stdout.buffer.write


def resp(*args):
    """One command, in RESP."""
    _write(b"*%d\r\n" % len(args))
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        _write(b"$%d\r\n%s\r\n" % (len(a), a))


def task_id(query):
    """The task id of a (normalised) query: its SHA-256's first 32 hex digits."""
    return hashlib.sha256(query.encode()).hexdigest()[:32]


def store_result(query, completed, ttl_ms, data, tag="{repoll}", who="bench-seed"):
    """A stored result of `query`, completed at `completed` (ms, Redis clock), kept `ttl_ms`."""
    tid = task_id(query)
    packed = "%d,%d,1,7,12,%d,%d,00\n%s%s%s" % (
        completed, completed - 1500, len(who), len(query.encode()), who, query, data)
    resp("SET", tag + ":r:" + tid, packed, "PX", str(ttl_ms))
    resp("ZADD", tag + ":results", str(completed), tid)
    return tid
