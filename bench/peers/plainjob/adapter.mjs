// WORKLOAD.md adapter for plainjob (npm), a peer that bench/run.sh measures beside toolq.
//
//   node adapter.mjs <enqueue|enqueue-batch|drain|latency> <db-path> <count> <concurrency>
//
// Prints one JSON line on stdout, everything else on stderr. Uses plainjob's public API only
// (defineQueue, defineWorker, add, addMany, countJobs) with its default configuration; the
// worker's poll interval is plainjob's default (1 s) except in `latency`, where it is reported.
import fs from "node:fs";
import Database from "better-sqlite3";
import { better, defineQueue, defineWorker, JobStatus } from "plainjob";

const [mode, dbPath, countArg, concArg] = process.argv.slice(2);
const count = Number(countArg);
const concurrency = Number(concArg ?? 16);
if (!mode || !dbPath || !Number.isInteger(count) || count <= 0 || !Number.isInteger(concurrency)) {
  console.error("usage: adapter.mjs <enqueue|enqueue-batch|drain|latency> <db> <count> <concurrency>");
  process.exit(2);
}

const quiet = { error: console.error, warn: console.error, info() {}, debug() {} };
const payload = (i) => ({ kind: "noop", i, pad: "0123456789abcdef" });
const nowNs = () => process.hrtime.bigint();
const secsSince = (t0) => Number(nowNs() - t0) / 1e9;

function fresh(path) {
  for (const suffix of ["", "-wal", "-shm", "-journal"]) fs.rmSync(path + suffix, { force: true });
}

function open(path) {
  const db = new Database(path);
  const queue = defineQueue({ connection: better(db), logger: quiet });
  return { db, queue };
}

function info(db) {
  return {
    journal_mode: db.pragma("journal_mode", { simple: true }),
    synchronous: ["OFF", "NORMAL", "FULL", "EXTRA"][db.pragma("synchronous", { simple: true })],
    sqlite: db.prepare("select sqlite_version() as v").get().v,
    system: "plainjob",
  };
}

function peakRssKib() {
  const line = fs.readFileSync("/proc/self/status", "utf8").split("\n").find((l) => l.startsWith("VmHWM:"));
  return line ? Number(line.split(/\s+/)[1]) : null;
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function enqueue(batch) {
  fresh(dbPath);
  const { db, queue } = open(dbPath);
  const t0 = nowNs();
  if (batch) {
    for (let i = 0; i < count; i += batch) {
      const items = [];
      for (let j = i; j < Math.min(i + batch, count); j++) items.push(payload(j));
      queue.addMany("noop", items);
    }
  } else {
    for (let i = 0; i < count; i++) queue.add("noop", payload(i));
  }
  const secs = secsSince(t0);
  const out = { mode: batch ? "enqueue-batch" : "enqueue", n: count, secs, rate: count / secs, ...info(db) };
  if (batch) out.batch = batch;
  queue.close();
  db.close();
  emit(out);
}

function startWorkers(queue, handler, pollIntervall) {
  const workers = [];
  for (let w = 0; w < concurrency; w++) {
    const worker = defineWorker("noop", handler, { queue, logger: quiet, pollIntervall });
    workers.push(worker);
    void worker.start();
  }
  return workers;
}

async function drain() {
  const { db, queue } = open(dbPath);
  let handled = 0;
  const t0 = nowNs();
  const workers = startWorkers(queue, (job) => {
    JSON.parse(job.data);
    handled++;
  });
  // Done when the handler ran N times and no job is left pending or processing.
  for (;;) {
    if (handled >= count) {
      const left = queue.countJobs({ status: JobStatus.Pending }) + queue.countJobs({ status: JobStatus.Processing });
      if (left === 0) break;
    }
    await new Promise((r) => setImmediate(r));
  }
  const secs = secsSince(t0);
  const out = { mode: "drain", n: count, concurrency, secs, rate: count / secs, handled, peak_rss_kib: peakRssKib(), ...info(db) };
  await Promise.all(workers.map((w) => w.stop()));
  queue.close();
  db.close();
  emit(out);
}

// The idle gaps of WORKLOAD.md's latency mode: uniform in 0..=100 ms from a fixed xorshift64.
function* gaps() {
  let x = 0x9e3779b97f4a7c15n;
  const mask = (1n << 64n) - 1n;
  for (;;) {
    x ^= (x << 13n) & mask;
    x ^= x >> 7n;
    x ^= (x << 17n) & mask;
    yield Number(x % 100001n) / 1000;
  }
}

async function latency() {
  fresh(dbPath);
  const { db, queue } = open(dbPath);
  const starts = new Map();
  const pollIntervall = 1000;
  const workers = startWorkers(queue, (job) => {
    starts.set(JSON.parse(job.data).i, nowNs());
  }, pollIntervall);
  await new Promise((r) => setTimeout(r, 1000));
  const samples = [];
  const gap = gaps();
  for (let i = 0; i < count; i++) {
    await new Promise((r) => setTimeout(r, gap.next().value));
    const t0 = nowNs();
    queue.add("noop", payload(i));
    while (!starts.has(i)) await new Promise((r) => setImmediate(r));
    samples.push(Number(starts.get(i) - t0) / 1e6);
  }
  samples.sort((a, b) => a - b);
  const pct = (p) => samples[Math.min(samples.length - 1, Math.floor((p / 100) * samples.length))];
  const out = { mode: "latency", samples: count, p50_ms: pct(50), p99_ms: pct(99), max_ms: samples[samples.length - 1], poll_interval_ms: pollIntervall, ...info(db) };
  await Promise.all(workers.map((w) => w.stop()));
  queue.close();
  db.close();
  emit(out);
}

const modes = { enqueue: () => enqueue(0), "enqueue-batch": () => enqueue(1000), drain, latency };
if (!modes[mode]) {
  console.error(`adapter.mjs: unknown mode ${JSON.stringify(mode)} (enqueue, enqueue-batch, drain, latency)`);
  process.exit(2);
}
await modes[mode]();
