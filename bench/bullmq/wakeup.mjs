// BullMQ, the peer: wake-up latency as repoll's `worker/examples/wakeup.rs` measures it,
// against a private redis-server given in REDIS_URL (scripts/bench starts one; port 6379 is
// refused).
//
//   REDIS_URL=redis://127.0.0.1:PORT/ [N=3000] [RATE=1000] [WORKERS=4] [WARMUP=500] [CONCURRENCY=1] node wakeup.mjs
//
// WORKERS Workers of concurrency CONCURRENCY run in a worker thread (their own event loop, as repoll's
// workers have tokio's threads; the producer's timers do not delay them), started and left
// idle for a second. The main thread then adds WARMUP + N jobs at RATE per second (job i at
// t0 + i/RATE, data {}, jobId = its query, each add not awaited before the next is issued).
// Latency = the processor's start − the moment queue.add was called, both on
// process.hrtime (CLOCK_MONOTONIC, shared by the threads). The processor returns at once
// (repoll's side makes one HTTP call to an in-process upstream, whose arrival is its mark).
// The first WARMUP jobs are left out of the figures. Finished jobs are kept 24 h (the
// Workers' removeOnComplete), as repoll keeps results.
//   RESULT peer=bullmq phase=wakeup n= rate= p50_ms= p90_ms= p99_ms= max_ms= mean_ms=

import { Queue, Worker } from 'bullmq';
import { Worker as Thread, isMainThread, parentPort, workerData } from 'node:worker_threads';

const NAME = 'wakeup';
const KEEP = { age: 24 * 3600 };
const query = (i) => `bench wakeup query #${String(i).padStart(6, '0')} abcdef`;

function connectionFor(url) {
  const u = new URL(url);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || 6379), maxRetriesPerRequest: null };
}

if (!isMainThread) {
  // The workers' thread: report [jobId, start time] of every job to the main thread.
  const { url, workers, concurrency } = workerData;
  const connection = connectionFor(url);
  const ws = [];
  for (let i = 0; i < workers; i++) {
    const w = new Worker(
      NAME,
      async (job) => {
        const t = process.hrtime.bigint();
        parentPort.postMessage([job.id, t]);
        return 'done';
      },
      { connection, concurrency, removeOnComplete: KEEP, removeOnFail: KEEP },
    );
    w.on('error', (err) => parentPort.postMessage(['error', String(err?.stack ?? err)]));
    w.on('failed', (job, err) => parentPort.postMessage(['error', `job ${job?.id} failed: ${err?.message}`]));
    ws.push(w);
  }
  await Promise.all(ws.map((w) => w.waitUntilReady()));
  parentPort.postMessage(['ready']);
  parentPort.on('message', async (m) => {
    if (m === 'stop') {
      await Promise.all(ws.map((w) => w.close()));
      parentPort.postMessage(['stopped']);
    }
  });
} else {
  const env = (k, d) => {
    const v = process.env[k];
    if (v === undefined || v === '') return d;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`${k} must be a non-negative integer, not ${v}`);
    return n;
  };
  const REDIS_URL = process.env.REDIS_URL;
  if (!REDIS_URL) {
    console.error('REDIS_URL is required (a private redis-server; scripts/bench starts one)');
    process.exit(2);
  }
  const connection = connectionFor(REDIS_URL);
  if (connection.port === 6379) {
    console.error('refusing port 6379 (the shared Redis); start a private redis-server (scripts/bench does)');
    process.exit(2);
  }
  const N = Math.max(1, env('N', 3000));
  const RATE = Math.max(1, env('RATE', 1000));
  const WORKERS = Math.max(1, env('WORKERS', 4));
  const WARMUP = env('WARMUP', 500);
  const CONCURRENCY = Math.max(1, env('CONCURRENCY', 1));
  const TOTAL = WARMUP + N;
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  const main = async () => {
    const queue = new Queue(NAME, { connection });
    await queue.waitUntilReady();
    await queue.obliterate({ force: true });

    const started = new Map();
    let fail;
    let allStarted;
    let stopped;
    const failed = new Promise((_, rej) => (fail = rej));
    const done = new Promise((res) => (allStarted = res));
    const closed = new Promise((res) => (stopped = res));
    let ready;
    const isReady = new Promise((res) => (ready = res));
    const th = new Thread(new URL(import.meta.url), { workerData: { url: REDIS_URL, workers: WORKERS, concurrency: CONCURRENCY } });
    th.on('error', (e) => fail(e));
    th.on('message', ([id, t]) => {
      if (id === 'ready') return ready();
      if (id === 'stopped') return stopped();
      if (id === 'error') return fail(new Error(t));
      if (!started.has(id)) started.set(id, t);
      if (started.size === TOTAL) allStarted();
    });
    await Promise.race([isReady, failed]);
    await sleep(1000); // started, idle

    const added = new Array(TOTAL);
    const adds = [];
    const stepNs = 1e9 / RATE;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < TOTAL; i++) {
      const wait = (i * stepNs - Number(process.hrtime.bigint() - t0)) / 1e6;
      if (wait > 0) await sleep(wait);
      added[i] = process.hrtime.bigint();
      adds.push(queue.add('task', {}, { jobId: query(i) }));
    }
    const issueSecs = Number(process.hrtime.bigint() - t0) / 1e9;
    await Promise.race([Promise.all(adds), failed]);
    const timer = setTimeout(() => fail(new Error(`only ${started.size} of ${TOTAL} jobs started in 60 s`)), 60_000);
    await Promise.race([done, failed]);
    clearTimeout(timer);
    th.postMessage('stop');
    await Promise.race([closed, failed]);
    await th.terminate();
    await queue.close();

    const lat = [];
    for (let i = WARMUP; i < TOTAL; i++) lat.push(Number(started.get(query(i)) - added[i]) / 1e6);
    lat.sort((a, b) => a - b);
    const pct = (p) => lat[Math.min(lat.length, Math.max(1, Math.ceil(p * lat.length))) - 1];
    const mean = lat.reduce((a, b) => a + b, 0) / lat.length;
    const rate = TOTAL / issueSecs;
    console.log(
      `BullMQ wake-up, add -> processor start: ${N} jobs (after ${WARMUP} warm-up) added at ${rate.toFixed(0)}/s ` +
        `into ${WORKERS} idle Workers (concurrency ${CONCURRENCY}): p50 ${pct(0.5).toFixed(2)} ms, p90 ${pct(0.9).toFixed(2)} ms, ` +
        `p99 ${pct(0.99).toFixed(2)} ms, max ${pct(1).toFixed(2)} ms, mean ${mean.toFixed(2)} ms`,
    );
    console.log(
      `RESULT peer=bullmq phase=wakeup n=${N} rate=${rate.toFixed(0)} p50_ms=${pct(0.5).toFixed(3)} ` +
        `p90_ms=${pct(0.9).toFixed(3)} p99_ms=${pct(0.99).toFixed(3)} max_ms=${pct(1).toFixed(3)} mean_ms=${mean.toFixed(3)}`,
    );
  };

  main().then(
    () => process.exit(0),
    (err) => {
      console.error(`wakeup bench failed: ${err?.stack ?? err}`);
      process.exit(1);
    },
  );
}
