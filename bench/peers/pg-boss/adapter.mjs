// WORKLOAD.md adapter for pg-boss (npm pg-boss), the second Postgres peer that bench/pg.sh
// measures beside toolq and Graphile Worker.
//
//   node adapter.mjs <enqueue|enqueue-batch|drain|latency|latency-xproc> <postgres-url> <count> <concurrency>
//
// Prints one JSON line on stdout, everything else on stderr. Public API only (new PgBoss,
// start, createQueue, send, insert, work, notifyWorker, getQueueSize, stop) with pg-boss's
// default configuration: its pool of 10 connections, the default queue policy and retry
// settings, Postgres' own durability (pg-boss sets no synchronous_commit).
//
// pg-boss 10 is the newest line that runs on Node 20 (11 and 12 need Node 22). Its work() has no
// concurrency option (v10 dropped teamSize/teamConcurrency): each call adds one polling worker,
// and batchSize hands a worker that many jobs at once. The adapter makes one worker with
// batchSize = concurrency whose handler runs the batch's jobs concurrently (16 running jobs per
// fetch, one complete() per batch); PGBOSS_BATCH=1 makes `concurrency` workers of one job each
// instead, like Graphile Worker's slots (about 4x slower here). A v10 worker waits its polling
// interval (default 2 s) after every fetch, even a full one ("1 job every 2 seconds" by
// default), so the handler calls notifyWorker(id) after a full batch, which the docs describe as
// bypassing the polling interval for this iteration: the worker fetches again at once while jobs
// remain and polls at the default interval once the queue is empty (what pg-boss 12's
// burstWhenBatchFull option does). The JSON line gives workers and batch_size.
//
// "A fresh file" is a dropped pgboss schema (start() creates it again). "No unfinished job" is
// getQueueSize(queue, { before: 'completed' }) = 0: nothing created, in retry or active.
import fs from "node:fs";
import { spawn } from "node:child_process";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import pg from "pg";
import PgBoss from "pg-boss";

const [mode, url, countArg, concArg] = process.argv.slice(2);
const count = Number(countArg);
const concurrency = Number(concArg ?? 16);
const QUEUE = "noop";
const batchSize = Number(process.env.PGBOSS_BATCH ?? concurrency);
if (!mode || !url || !Number.isInteger(count) || count <= 0 || !Number.isInteger(concurrency) || !(batchSize >= 1)) {
  console.error("usage: adapter.mjs <enqueue|enqueue-batch|drain|latency|latency-xproc> <postgres-url> <count> <concurrency>");
  process.exit(2);
}

const payload = (i) => ({ kind: "noop", i, pad: "0123456789abcdef" });
const nowNs = () => process.hrtime.bigint();
const secsSince = (t0) => Number(nowNs() - t0) / 1e9;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function peakRssKib() {
  const line = fs.readFileSync("/proc/self/status", "utf8").split("\n").find((l) => l.startsWith("VmHWM:"));
  return line ? Number(line.split(/\s+/)[1]) : null;
}

async function sql(text) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(text)).rows;
  } finally {
    await c.end();
  }
}

async function info() {
  const [{ server_version }] = await sql("SHOW server_version");
  const [{ synchronous_commit }] = await sql("SHOW synchronous_commit");
  const version = JSON.parse(fs.readFileSync(new URL("./node_modules/pg-boss/package.json", import.meta.url), "utf8")).version;
  return { system: "pg-boss", version, engine: "postgres", postgres: server_version, synchronous_commit };
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function open() {
  const boss = new PgBoss({ connectionString: url });
  boss.on("error", (e) => console.error("pg-boss error:", e.message ?? e));
  await boss.start();
  await boss.createQueue(QUEUE);
  return boss;
}

async function fresh() {
  await sql("DROP SCHEMA IF EXISTS pgboss CASCADE");
  return open();
}

async function enqueue(batch) {
  const boss = await fresh();
  const t0 = nowNs();
  if (batch) {
    for (let i = 0; i < count; i += batch) {
      const jobs = [];
      for (let j = i; j < Math.min(i + batch, count); j++) jobs.push({ name: QUEUE, data: payload(j) });
      await boss.insert(jobs);
    }
  } else {
    for (let i = 0; i < count; i++) await boss.send(QUEUE, payload(i));
  }
  const secs = secsSince(t0);
  await boss.stop({ graceful: false, wait: true });
  const out = { mode: batch ? "enqueue-batch" : "enqueue", n: count, secs, rate: count / secs, ...(await info()) };
  if (batch) out.batch = batch;
  emit(out);
}

// `concurrency / batchSize` workers (at least one), each handed up to batchSize jobs at a time.
async function startWorkers(boss, onJob) {
  const workers = Math.max(1, Math.floor(concurrency / batchSize));
  for (let w = 0; w < workers; w++) {
    let id = null;
    id = await boss.work(QUEUE, { batchSize }, async (jobs) => {
      await Promise.all(jobs.map(async (job) => onJob(job)));
      if (id && jobs.length === batchSize) boss.notifyWorker(id);
    });
  }
  return { workers, batch_size: batchSize, poll_interval_ms: 2000 };
}

async function drain() {
  const boss = await open();
  let handled = 0;
  const t0 = nowNs();
  const shape = await startWorkers(boss, (job) => {
    if (job.data.kind !== "noop") throw new Error("bad payload");
    handled++;
  });
  while (handled < count) await sleep(1);
  while ((await boss.getQueueSize(QUEUE, { before: "completed" })) > 0) await sleep(1);
  const secs = secsSince(t0);
  await boss.stop({ graceful: false, wait: true });
  emit({ mode: "drain", n: count, concurrency, secs, rate: count / secs, handled, peak_rss_kib: peakRssKib(), ...shape, ...(await info()) });
}

// The idle gaps of WORKLOAD.md's latency mode: uniform in 0..100 ms from a fixed xorshift64
// (the same sequence as Graphile Worker's adapter).
function* gaps() {
  let x = 88172645463325252n;
  for (;;) {
    x ^= (x << 13n) & 0xffffffffffffffffn;
    x ^= x >> 7n;
    x ^= (x << 17n) & 0xffffffffffffffffn;
    yield Number(x % 100n);
  }
}

// Same protocol as toolq's `latency`: workers warm for 1 s, then `count` samples of enqueue ->
// handler start after an idle gap. In latency-xproc a child process (this script, mode
// `enqueuer`) does each send and reports its t0; process.hrtime is CLOCK_MONOTONIC, one clock
// for both processes.
async function latency(xproc) {
  const boss = await fresh();
  const starts = new Map();
  const shape = await startWorkers(boss, (job) => void starts.set(job.data.i, nowNs()));
  let child = null;
  let lines = null;
  if (xproc) {
    child = spawn(process.execPath, [fileURLToPath(import.meta.url), "enqueuer", url, "1", "1"], { stdio: ["pipe", "pipe", "inherit"] });
    lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const ready = await lines.next();
    if (ready.done) throw new Error("enqueuer exited before it was ready");
  }
  await sleep(1000);
  const lat = [];
  const gap = gaps();
  for (let k = 0; k < count; k++) {
    await sleep(gap.next().value);
    let t0;
    if (xproc) {
      child.stdin.write(`${k}\n`);
      const reply = await lines.next();
      if (reply.done) throw new Error("enqueuer exited");
      t0 = BigInt(reply.value);
    } else {
      t0 = nowNs();
      await boss.send(QUEUE, payload(k));
    }
    while (!starts.has(k)) await new Promise((r) => setImmediate(r));
    lat.push(Number(starts.get(k) - t0) / 1e6);
  }
  if (child) child.stdin.end();
  await boss.stop({ graceful: false, wait: true });
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length, Math.max(1, Math.ceil(p * lat.length))) - 1];
  emit({ mode: xproc ? "latency-xproc" : "latency", samples: lat.length, p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: lat[lat.length - 1], ...shape, ...(await info()) });
}

// The other process of latency-xproc: one send per line read on stdin, answering each with
// the monotonic time taken just before the send.
async function enqueuer() {
  const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false });
  boss.on("error", (e) => console.error("pg-boss error:", e.message ?? e));
  await boss.start();
  process.stdout.write("ready\n");
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const t0 = nowNs();
    await boss.send(QUEUE, payload(Number(line)));
    process.stdout.write(`${t0}\n`);
  }
  await boss.stop({ graceful: false, wait: true });
}

const modes = {
  enqueue: () => enqueue(0),
  "enqueue-batch": () => enqueue(1000),
  drain,
  latency: () => latency(false),
  "latency-xproc": () => latency(true),
  enqueuer,
};
if (!modes[mode]) {
  console.error(`mode ${mode}: expected one of ${Object.keys(modes).filter((m) => m !== "enqueuer").join(", ")}`);
  process.exit(2);
}
modes[mode]().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
