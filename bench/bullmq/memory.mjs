// BullMQ, the peer: Redis memory per job in one state, as repoll's
// `queue/examples/memory.rs` measures it, against a private redis-server given in REDIS_URL
// (scripts/bench starts a fresh one per state; port 6379 is refused).
//
//   REDIS_URL=redis://127.0.0.1:PORT/ STATE=ready|delayed|result [N=10000] [KEEP_IN=worker|job] node memory.mjs
//
// The same N queries of 33–38 characters as repoll's example, each the job's jobId (as
// repoll's de-duplication by query needs; the query is then not repeated in the data):
//   ready    addBulk of N jobs, data {} (repoll enqueues with payload ""), in chunks of 100.
//   delayed  the jobs of `ready`, fetched by a Worker (concurrency 100), whose processor does
//            BullMQ's documented "poll again later": job.updateData(PARTIAL) (the 80-byte
//            partial, stored as a JSON string: 82 bytes), job.moveToDelayed(now + 1 h, token),
//            throw DelayedError. This is the moveToDelayed path, not the `delay` option: like
//            repoll's claim + reschedule the job was taken once (processedOn, attempts
//            started, its lock released) and now waits in the delayed set for its next turn;
//            a job added with `delay` never ran and so stores less.
//   result   the jobs of `ready`, completed by a Worker (concurrency 100) returning the
//            129-byte result (as a parsed object, so that BullMQ's JSON.stringify stores the
//            same 129 bytes rather than an escaped string), removeOnComplete { age: 86400 }
//            (kept 24 h, as repoll's result_ttl_ms; see KEEP_IN below for where that is set).
// One warm-up job goes the same way first (scripts loaded, the queue's meta keys and event
// stream created); memory = INFO used_memory after − before (workers closed both times),
// divided by N, so it includes the share of the capped event stream (BullMQ's default
// maxLenEvents 10,000) the N jobs fill, as repoll's does. A breakdown by key pattern
// (MEMORY USAGE of every key) follows.
//   RESULT peer=bullmq phase=mem_STATE n= bytes= data_bytes=

import { Queue, Worker, DelayedError } from 'bullmq';
import IORedis from 'ioredis';

const PARTIAL = 'partial: 40 of 100 rows fetched, eta 12 s; next page cursor c3f9a1b27e04d8a6b5f2';
const RESULT =
  '{"status":"done","rows":100,"source":"upstream","cursor":null,"items":[1,2,3,4,5,6,7,8,9,10],"note":"a complete result payload."}';
const DATA_BYTES = { ready: 0, delayed: PARTIAL.length, result: RESULT.length };
const KEEP = { age: 24 * 3600 };
// Where "keep finished jobs 24 h" is configured: `worker` (default) = the Workers'
// removeOnComplete/removeOnFail options, the leanest: the job's stored opts then hold only
// the jobId, so its hash stays a compact listpack (every value <= 64 bytes). `job` = the
// queue's defaultJobOptions, as bench.mjs does: every job's opts JSON then carries them,
// passes 64 bytes and turns the job hash into a hashtable (about 200 B more per job).
const KEEP_IN = process.env.KEEP_IN || 'worker';
const NAME = 'mem';

const query = (i) => `bench memory query #${String(i).padStart(6, '0')} ${'abcdefghijk'.slice(0, 6 + (i % 6))}`;

const REDIS_URL = process.env.REDIS_URL;
const STATE = process.env.STATE;
const N = Number(process.env.N || 10000);
if (!REDIS_URL || !(STATE in DATA_BYTES) || !Number.isInteger(N) || N <= 0 || !['worker', 'job'].includes(KEEP_IN)) {
  console.error('usage: REDIS_URL=redis://127.0.0.1:PORT/ STATE=ready|delayed|result [N=10000] [KEEP_IN=worker|job] node memory.mjs');
  process.exit(2);
}
const u = new URL(REDIS_URL);
const connection = { host: u.hostname || '127.0.0.1', port: Number(u.port || 6379), maxRetriesPerRequest: null };
if (connection.port === 6379) {
  console.error('refusing port 6379 (the shared Redis); start a private redis-server (scripts/bench does)');
  process.exit(2);
}
const redis = new IORedis({ host: connection.host, port: connection.port });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function usedMemory() {
  return Number(/used_memory:(\d+)/.exec(await redis.info('memory'))[1]);
}

/// Takes jobs [from, to) to STATE.
async function build(queue, from, to) {
  for (let s = from; s < to; s += 100) {
    const jobs = [];
    for (let i = s; i < Math.min(to, s + 100); i++) jobs.push({ name: 'task', data: {}, opts: { jobId: query(i) } });
    await queue.addBulk(jobs);
  }
  if (STATE === 'ready') return;
  const target = to - from;
  let n = 0;
  let finish;
  let fail;
  const done = new Promise((res, rej) => {
    finish = res;
    fail = rej;
  });
  const hit = () => {
    n += 1;
    if (n === target) finish();
  };
  const processor =
    STATE === 'delayed'
      ? async (job, token) => {
          await job.updateData(PARTIAL);
          await job.moveToDelayed(Date.now() + 3600_000, token);
          hit();
          throw new DelayedError();
        }
      : async () => JSON.parse(RESULT);
  const w = new Worker(NAME, processor, {
    connection,
    concurrency: 100,
    ...(KEEP_IN === 'worker' ? { removeOnComplete: KEEP, removeOnFail: KEEP } : {}),
  });
  if (STATE === 'result') w.on('completed', hit);
  w.on('failed', (job, err) => fail(new Error(`job ${job?.id} failed: ${err?.message}`)));
  w.on('error', fail);
  const timer = setTimeout(() => fail(new Error(`timed out: ${n} of ${target}`)), 300_000);
  await done;
  clearTimeout(timer);
  await w.close();
}

async function breakdown() {
  const keys = await redis.keys('*');
  const out = new Map();
  for (let s = 0; s < keys.length; s += 1000) {
    const chunk = keys.slice(s, s + 1000);
    const p = redis.pipeline();
    for (const k of chunk) p.call('MEMORY', 'USAGE', k, 'SAMPLES', '0');
    const res = await p.exec();
    chunk.forEach((k, i) => {
      const pattern = k.replace(/bench memory query #\d+ [a-k]+/g, '<query>').replace(/[0-9a-f]{16,}/g, '<id>');
      const e = out.get(pattern) ?? [0, 0];
      e[0] += 1;
      e[1] += Number(res[i][1] ?? 0);
      out.set(pattern, e);
    });
  }
  return [...out.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
}

async function main() {
  const version = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? '?';
  const queue = new Queue(NAME, {
    connection,
    ...(KEEP_IN === 'job' ? { defaultJobOptions: { removeOnComplete: KEEP, removeOnFail: KEEP } } : {}),
  });
  await queue.waitUntilReady();
  await build(queue, N, N + 1); // warm-up
  await sleep(300);
  const before = await usedMemory();
  await build(queue, 0, N);
  const counts = await queue.getJobCounts('wait', 'delayed', 'completed', 'active', 'failed');
  const want = { ready: 'wait', delayed: 'delayed', result: 'completed' }[STATE];
  if (counts[want] !== N + 1) throw new Error(`expected ${N + 1} ${want}, got ${JSON.stringify(counts)}`);
  await sleep(300);
  const after = await usedMemory();
  await queue.close();
  const per = (after - before) / N;
  console.log(
    `BullMQ, ${STATE}: ${N} jobs, redis-server ${version} at ${connection.host}:${connection.port}: ` +
      `used_memory +${after - before} B = ${per.toFixed(0)} B/job (data of its own: ${DATA_BYTES[STATE]} B/job; ` +
      `24 h retention set on the ${KEEP_IN === 'worker' ? 'Workers' : 'jobs (defaultJobOptions)'})`,
  );
  for (const [pattern, [keys, bytes]] of await breakdown()) {
    console.log(`  ${pattern.padEnd(40)} ${String(keys).padStart(7)} keys ${(bytes / (N + 1)).toFixed(1).padStart(9)} B/task`);
  }
  console.log(`RESULT peer=bullmq phase=mem_${STATE} n=${N} bytes=${per.toFixed(0)} data_bytes=${DATA_BYTES[STATE]}`);
  await redis.quit();
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`memory bench failed: ${err?.stack ?? err}`);
    process.exit(1);
  },
);
