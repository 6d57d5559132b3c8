// WORKLOAD.md adapter for Graphile Worker (npm graphile-worker), the Postgres peer that
// bench/run.sh measures beside toolq on Postgres.
//
//   node adapter.mjs <enqueue|enqueue-batch|drain|latency> <postgres-url> <count> <concurrency>
//
// Prints one JSON line on stdout, everything else on stderr. Public API only (makeWorkerUtils,
// addJob, addJobs, migrate, run) with the default configuration (LISTEN/NOTIFY wake-ups, its
// default poll interval). "A fresh file" is an emptied graphile_worker schema; completed jobs
// are deleted by Graphile Worker, so "no unfinished job" is an empty jobs table.
import fs from "node:fs";
import pg from "pg";
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [mode, url, countArg, concArg] = process.argv.slice(2);
const count = Number(countArg);
const concurrency = Number(concArg ?? 16);
if (!mode || !url || !Number.isInteger(count) || count <= 0 || !Number.isInteger(concurrency)) {
  console.error("usage: adapter.mjs <enqueue|enqueue-batch|drain|latency> <postgres-url> <count> <concurrency>");
  process.exit(2);
}

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`${level}: ${message}`);
});
const payload = (i) => ({ kind: "noop", i, pad: "0123456789abcdef" });
const nowNs = () => process.hrtime.bigint();
const secsSince = (t0) => Number(nowNs() - t0) / 1e9;

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
  return { system: "graphile-worker", engine: "postgres", postgres: server_version };
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function fresh() {
  await sql("DROP SCHEMA IF EXISTS graphile_worker CASCADE");
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  await utils.migrate();
  return utils;
}

async function enqueue(batch) {
  const utils = await fresh();
  const t0 = nowNs();
  if (batch) {
    for (let i = 0; i < count; i += batch) {
      const specs = [];
      for (let j = i; j < Math.min(i + batch, count); j++) specs.push({ identifier: "noop", payload: payload(j) });
      await utils.addJobs(specs);
    }
  } else {
    for (let i = 0; i < count; i++) await utils.addJob("noop", payload(i));
  }
  const secs = secsSince(t0);
  await utils.release();
  const out = { mode: batch ? "enqueue-batch" : "enqueue", n: count, secs, rate: count / secs, ...(await info()) };
  if (batch) out.batch = batch;
  emit(out);
}

async function unfinished() {
  const [{ n }] = await sql("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
  return n;
}

async function drain() {
  let handled = 0;
  const t0 = nowNs();
  const runner = await run({
    connectionString: url,
    concurrency,
    // Graphile warns when its pool (default 10) is smaller than the concurrency; give it one
    // connection per slot, as its docs advise, so the peer runs at its best.
    maxPoolSize: Math.max(10, concurrency + 1),
    noHandleSignals: true,
    logger,
    taskList: {
      noop: async (p) => {
        if (p.kind !== "noop") throw new Error("bad payload");
        handled++;
      },
    },
  });
  while (handled < count) await new Promise((r) => setTimeout(r, 1));
  while ((await unfinished()) > 0) await new Promise((r) => setTimeout(r, 1));
  const secs = secsSince(t0);
  await runner.stop();
  emit({ mode: "drain", n: count, concurrency, secs, rate: count / secs, handled, peak_rss_kib: peakRssKib(), ...(await info()) });
}

// Same protocol as toolq's `latency`: worker warm for 1 s, then `count` samples of enqueue ->
// handler start after an idle gap of 0-100 ms (xorshift sequence as WORKLOAD.md).
async function latency() {
  const utils = await fresh();
  const starts = new Map();
  const runner = await run({
    connectionString: url,
    concurrency,
    // Graphile warns when its pool (default 10) is smaller than the concurrency; give it one
    // connection per slot, as its docs advise, so the peer runs at its best.
    maxPoolSize: Math.max(10, concurrency + 1),
    noHandleSignals: true,
    logger,
    taskList: { noop: async (p) => void starts.set(p.i, nowNs()) },
  });
  await new Promise((r) => setTimeout(r, 1000));
  let x = 88172645463325252n;
  const lat = [];
  for (let k = 0; k < count; k++) {
    x ^= (x << 13n) & 0xffffffffffffffffn;
    x ^= x >> 7n;
    x ^= (x << 17n) & 0xffffffffffffffffn;
    await new Promise((r) => setTimeout(r, Number(x % 100n)));
    const t0 = nowNs();
    await utils.addJob("noop", payload(k));
    while (!starts.has(k)) await new Promise((r) => setImmediate(r));
    lat.push(Number(starts.get(k) - t0) / 1e6);
  }
  await runner.stop();
  await utils.release();
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length, Math.max(1, Math.ceil(p * lat.length))) - 1];
  emit({ mode: "latency", samples: lat.length, p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: lat[lat.length - 1], ...(await info()) });
}

const modes = { enqueue: () => enqueue(0), "enqueue-batch": () => enqueue(1000), drain, latency };
if (!modes[mode]) {
  console.error(`mode ${mode}: expected one of ${Object.keys(modes).join(", ")}`);
  process.exit(2);
}
modes[mode]().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
