// BullMQ, the peer: the same phases as repoll's `queue/examples/throughput.rs`, against a
// private redis-server given in REDIS_URL (scripts/bench starts one on a free port). Never
// point it at a shared Redis: it deletes and refills the queue "bench" (obliterate, then 100k+
// jobs), so it refuses port 6379.
//
//   REDIS_URL=redis://127.0.0.1:PORT/ [N=100000] [WORKERS=4] [CONCURRENCY=100] node bench.mjs
//
// Phases (repoll's counterpart in brackets):
//   enqueue  Queue.addBulk in chunks of 1000, one chunk after the other. BullMQ sends a chunk
//            as one MULTI/EXEC of addJob scripts: pipelined, like repoll's 1000 enqueue
//            scripts in flight.                                           [enqueue, pipelined]
//   batched  WORKERS Worker instances, each with concurrency CONCURRENCY (4 x 100 jobs in
//            flight, as repoll's 4 workers x claim(100)); the processor returns "result" at
//            once. Timed from run() until the N-th 'completed' event.  [batched claim+complete]
//   single   one Worker, concurrency 1, over N/5 jobs.                [claim(1)+complete]
//   poll     one Worker, concurrency CONCURRENCY, over N/5 jobs; the processor does BullMQ's
//            documented "poll again later" step: job.moveToDelayed(now + 1 h, token), then
//            throws DelayedError. Timed until the last moveToDelayed has returned. (Each
//            job comes once: it is due again only in an hour, as in repoll's phase.)
//                                                                     [claim(100)+reschedule]
//
// Completed jobs are kept for 24 h (removeOnComplete: { age: 86400 }): repoll keeps each
// result for result_ttl_ms = 24 h, so both queues keep what they finished, and both pay
// for writing it. (BullMQ's default keeps completed jobs forever; removeOnComplete: true
// would delete them and skip that work, which repoll does not.)
//
// Redis-side cost per job, from the server's own counters, as the Rust example measures it:
//   cpu_us     Redis CPU (INFO cpu: used_cpu_user + used_cpu_sys delta) per job;
//   script_us  microseconds inside scripts (INFO commandstats usec of eval/evalsha/fcall and
//              their _ro forms) per job; wall clock, so it grows on a loaded machine;
//   scripts    script calls per job (same commands; each is one client command);
//   cmds       all commands Redis executed per job (every cmdstat_* except info). Redis also
//              counts the commands a script runs (redis.call) here, so this is the work done
//              inside Redis, not the number sent by the client.
// One line per phase, for scripts/bench:
//   RESULT peer=bullmq phase=batched n=... secs=... tps=... cpu_us=... script_us=... scripts=... cmds=...
// Any failure (a failed job, a wrong count, a timeout) exits non-zero.

import { Queue, Worker, DelayedError } from 'bullmq';
import IORedis from 'ioredis';
import { readFileSync } from 'node:fs';

const env = (k, d) => {
  const v = process.env[k];
  if (v === undefined || v === '') return d;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${k} must be a positive integer, not ${v}`);
  return n;
};

const REDIS_URL = process.env.REDIS_URL;
if (!REDIS_URL) {
  console.error('REDIS_URL is required (a private redis-server; scripts/bench starts one)');
  process.exit(2);
}
const N = env('N', 100000);
const WORKERS = env('WORKERS', 4);
const CONCURRENCY = env('CONCURRENCY', 100);
const CHUNK = 1000;
const SMALL_N = Math.max(1, Math.floor(N / 5));
// A phase that has not finished by then has hung: fail rather than wait forever.
const PHASE_TIMEOUT_MS = env('PHASE_TIMEOUT_S', 600) * 1000;
const KEEP = { age: 24 * 3600 }; // seconds, = repoll's default result_ttl_ms
const NAME = 'bench';

const u = new URL(REDIS_URL);
const connection = {
  host: u.hostname || '127.0.0.1',
  port: Number(u.port || 6379),
  maxRetriesPerRequest: null,
};
if (connection.port === 6379) {
  console.error('refusing port 6379 (the shared Redis); start a private redis-server (scripts/bench does)');
  process.exit(2);
}
const BULLMQ_VERSION = JSON.parse(
  readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url)),
).version;

// Our own connection for INFO only (info calls are left out of the counts).
const stats = new IORedis({ host: connection.host, port: connection.port, lazyConnect: false });

const SCRIPT_CMDS = new Set(['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro']);

async function snap() {
  const s = { scripts: 0, scriptUs: 0, cmds: 0, cpu: 0 };
  for (const line of (await stats.info('commandstats')).split(/\r?\n/)) {
    const m = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (!m) continue;
    const [, name, calls, usec] = m;
    if (name === 'info') continue;
    s.cmds += Number(calls);
    if (SCRIPT_CMDS.has(name)) {
      s.scripts += Number(calls);
      s.scriptUs += Number(usec);
    }
  }
  for (const line of (await stats.info('cpu')).split(/\r?\n/)) {
    const [k, v] = line.trim().split(':');
    if (k === 'used_cpu_user' || k === 'used_cpu_sys') s.cpu += Number(v);
  }
  return s;
}

function diff(a, b) {
  return {
    scripts: b.scripts - a.scripts,
    scriptUs: b.scriptUs - a.scriptUs,
    cmds: b.cmds - a.cmds,
    cpu: b.cpu - a.cpu,
  };
}

function report(phase, label, n, secs, d, extra = '') {
  const tps = n / secs;
  const cpuUs = (d.cpu * 1e6) / n;
  const scriptUs = d.scriptUs / n;
  const scripts = d.scripts / n;
  const cmds = d.cmds / n;
  console.log(
    `${label.padEnd(30)}${tps.toFixed(0).padStart(9)} jobs/s  (${n} jobs in ${secs.toFixed(2)} s${extra})`,
  );
  console.log(
    `  ${scripts.toFixed(3)} script calls/job, ${cmds.toFixed(2)} Redis commands/job (incl. inside scripts), ` +
      `${scriptUs.toFixed(1)} us/job inside scripts, ${cpuUs.toFixed(1)} us/job Redis CPU`,
  );
  console.log(
    `RESULT peer=bullmq phase=${phase} n=${n} secs=${secs.toFixed(3)} tps=${tps.toFixed(0)} ` +
      `cpu_us=${cpuUs.toFixed(2)} script_us=${scriptUs.toFixed(2)} scripts=${scripts.toFixed(3)} cmds=${cmds.toFixed(2)}`,
  );
  return tps;
}

const secsSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e9;

async function enqueue(queue, prefix, n) {
  for (let start = 0; start < n; start += CHUNK) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + CHUNK); i++) {
      jobs.push({ name: 'task', data: { query: `${prefix} ${i}`, payload: 'payload' } });
    }
    const added = await queue.addBulk(jobs);
    if (added.length !== jobs.length) throw new Error(`addBulk added ${added.length} of ${jobs.length}`);
  }
}

/// Runs `workers` until `progress` has counted `target` jobs, timing from run() to then.
/// Resolves with { secs, d } (elapsed seconds, Redis counter deltas); rejects on a failed
/// job, a worker error or the timeout.
async function timed(workers, target, progress) {
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  let finish;
  let fail;
  const done = new Promise((res, rej) => {
    finish = res;
    fail = rej;
  });
  for (const w of workers) {
    w.on('failed', (job, err) => fail(new Error(`job ${job?.id} failed: ${err?.message}`)));
    w.on('error', (err) => fail(err));
  }
  progress.onDone = finish;
  progress.target = target;
  const timer = setTimeout(
    () => fail(new Error(`timed out after ${PHASE_TIMEOUT_MS / 1000} s: ${progress.n} of ${target}`)),
    PHASE_TIMEOUT_MS,
  );
  const s0 = await snap();
  const t0 = process.hrtime.bigint();
  for (const w of workers) w.run().catch((err) => fail(err));
  try {
    await done;
  } finally {
    clearTimeout(timer);
  }
  const secs = secsSince(t0);
  const d = diff(s0, await snap());
  await Promise.all(workers.map((w) => w.close()));
  return { secs, d };
}

function counter() {
  const p = { n: 0, target: Infinity, onDone: () => {} };
  p.hit = () => {
    p.n += 1;
    if (p.n === p.target) p.onDone();
  };
  return p;
}

async function expectCounts(queue, want, after) {
  const got = await queue.getJobCounts('wait', 'active', 'delayed', 'completed', 'failed', 'prioritized');
  for (const [k, v] of Object.entries(want)) {
    if (got[k] !== v) {
      throw new Error(`after ${after}: ${k} = ${got[k]}, expected ${v} (counts: ${JSON.stringify(got)})`);
    }
  }
}

async function main() {
  const server = await stats.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(server)?.[1] ?? '?';
  console.log(
    `BullMQ ${BULLMQ_VERSION} (Node ${process.versions.node}), redis-server ${redisVersion} at ${connection.host}:${connection.port}, ` +
      `${N} jobs, ${WORKERS} workers x concurrency ${CONCURRENCY}, removeOnComplete ${JSON.stringify(KEEP)}`,
  );

  const queue = new Queue(NAME, {
    connection,
    defaultJobOptions: { removeOnComplete: KEEP, removeOnFail: KEEP },
  });
  await queue.waitUntilReady();
  // Start from an empty queue (the server is private; this only guards a re-run against it).
  await queue.obliterate({ force: true });

  // a. enqueue
  const s0 = await snap();
  const t0 = process.hrtime.bigint();
  await enqueue(queue, 'bench', N);
  const secs = secsSince(t0);
  report('enqueue', 'enqueue (addBulk x 1000):', N, secs, diff(s0, await snap()));
  await expectCounts(queue, { wait: N }, 'enqueue');

  // b. K workers x concurrency C, the processor returns at once
  {
    const p = counter();
    const workers = [];
    for (let i = 0; i < WORKERS; i++) {
      const w = new Worker(NAME, async () => 'result', { connection, concurrency: CONCURRENCY, autorun: false });
      w.on('completed', p.hit);
      workers.push(w);
    }
    const { secs, d } = await timed(workers, N, p);
    report('batched', 'process (K x concurrency C):', N, secs, d, `, ${WORKERS} workers x concurrency ${CONCURRENCY}`);
    await expectCounts(queue, { wait: 0, active: 0, failed: 0, completed: N }, 'batched');
  }

  // c. one worker, concurrency 1
  await enqueue(queue, 'single', SMALL_N);
  {
    const p = counter();
    const w = new Worker(NAME, async () => 'result', { connection, concurrency: 1, autorun: false });
    w.on('completed', p.hit);
    const { secs, d } = await timed([w], SMALL_N, p);
    report('single', 'one worker, concurrency 1:', SMALL_N, secs, d, ', sequential');
    await expectCounts(queue, { wait: 0, active: 0, failed: 0, completed: N + SMALL_N }, 'single');
  }

  // d. "still processing, poll later": moveToDelayed + DelayedError
  await enqueue(queue, 'resched', SMALL_N);
  {
    const p = counter();
    const w = new Worker(
      NAME,
      async (job, token) => {
        await job.moveToDelayed(Date.now() + 3600_000, token);
        p.hit();
        throw new DelayedError();
      },
      { connection, concurrency: CONCURRENCY, autorun: false },
    );
    const { secs, d } = await timed([w], SMALL_N, p);
    report('poll', 'moveToDelayed + DelayedError:', SMALL_N, secs, d, `, concurrency ${CONCURRENCY}`);
    await expectCounts(
      queue,
      { wait: 0, active: 0, failed: 0, delayed: SMALL_N, completed: N + SMALL_N },
      'poll',
    );
  }

  await queue.close();
  await stats.quit();
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`bench failed: ${err?.stack ?? err}`);
    process.exit(1);
  },
);
