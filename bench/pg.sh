#!/usr/bin/env bash
# The Postgres half of bench/run.sh (sourced by it, or run alone): a throwaway server on a free
# port in $DIR/pg with the server's default durability (fsync, synchronous_commit on), stopped on
# exit; then per round the raw Postgres limit, toolq's workload modes on a postgres:// URL, 1 and
# 4 `toolq worker --drain` processes on one queue, and the Graphile Worker and pg-boss peers.
#
#   bench/pg.sh [N] [SAMPLES] [RUNS]      (BENCH_DIR, BENCH_PEERS=0 as for run.sh)
#   BENCH_PGBOSS_SAMPLES=S latency samples for pg-boss (default 20, at most SAMPLES): it polls
#   every 2 s by default, so each sample takes ~2 s
#   BENCH_COMPOSE=0 skips composition (issue 36), as for run.sh; BENCH_CHAIN_N as for run.sh;
#   BENCH_PG_BATCH_N=N runs in the one-batch figure (default BENCH_BATCH_N, else 100000; 0 skips)
#   BENCH_SESSIONS=0 skips many sessions and hosts (issue 38), BENCH_SLEEP_N as for run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
SAMPLES=${2:-200}
RUNS=${3:-3}
CONC=16
DIR=${BENCH_DIR:-bench/out}
RAW=${PG_RAW:-$DIR/pg.jsonl}
mkdir -p "$DIR"
: > "$RAW"

source bench/pg_server.sh
trap pg_server_stop EXIT
pg_server_start "$DIR"
psql_admin "CREATE DATABASE toolq" && psql_admin "CREATE DATABASE graphile" && psql_admin "CREATE DATABASE pgboss"
echo "# postgres $("$BIN/postgres" --version | awk '{print $3}') on $PGDIR, port $PORT; fsync and synchronous_commit at their defaults"

cargo build --profile dist --quiet --example workload --example pg_limit --bin toolq
# The build lands in CARGO_TARGET_DIR when it is set.
TD=${CARGO_TARGET_DIR:-target}
W=$TD/dist/examples/workload
L=$TD/dist/examples/pg_limit
T=$TD/dist/toolq
GW=""
PB=""
if [ "${BENCH_PEERS:-1}" != 0 ] && command -v node >/dev/null && command -v npm >/dev/null; then
  if [ -d bench/peers/graphile-worker/node_modules ] || (cd bench/peers/graphile-worker && npm ci --no-audit --no-fund >&2); then
    GW="node bench/peers/graphile-worker/adapter.mjs"
  else
    echo "bench: graphile-worker did not install; measuring without it" >&2
  fi
  if [ -d bench/peers/pg-boss/node_modules ] || (cd bench/peers/pg-boss && npm ci --no-audit --no-fund >&2); then
    PB="node bench/peers/pg-boss/adapter.mjs"
  else
    echo "bench: pg-boss did not install; measuring without it" >&2
  fi
elif [ "${BENCH_PEERS:-1}" != 0 ]; then
  echo "bench: node and npm are needed for the Graphile Worker and pg-boss peers; measuring without them" >&2
fi
PB_SAMPLES=${BENCH_PGBOSS_SAMPLES:-20}
[ "$PB_SAMPLES" -le "$SAMPLES" ] || PB_SAMPLES=$SAMPLES

# `toolq worker --drain` in P processes on one queue of N echo runs (enqueued in one batch file).
drain_procs() {
  local p=$1 jobs="$PGDIR/jobs.jsonl"
  python3 -c "
import json,sys
for i in range($N): print(json.dumps({'tool':'echo','args':{'message':'noop %d' % i}}))" > "$jobs"
  psql_admin "DROP DATABASE IF EXISTS procs WITH (FORCE)" && psql_admin "CREATE DATABASE procs"
  "$T" --db "$URL/procs" enqueue --file "$jobs" >/dev/null
  local t0 t1
  t0=$(date +%s.%N)
  for _ in $(seq "$p"); do
    TOOLQ_WORKER__CONCURRENCY=$CONC TOOLQ_WORKER__PER_SESSION=$CONC TOOLQ_RETENTION__ENABLED=false \
      "$T" --db "$URL/procs" worker --drain 2>/dev/null &
  done
  wait
  t1=$(date +%s.%N)
  local done
  done=$("$BIN/psql" -qAt "$URL/procs" -c "SELECT count(*) FROM runs WHERE state = 'completed'")
  python3 -c "import json; s=$t1-$t0; print(json.dumps({'mode':'pg-drain-procs','procs':$p,'n':$N,'completed':$done,'secs':round(s,3),'rate':round($N/s,1)}))"
}

# Workload mode $1 on the toolq database with count $2, reported as pg-$3 (default pg-$1).
pgm() {
  local m=$1 n=$2 as=${3:-$1}
  $W "$m" "$URL/toolq" "$n" "$CONC" | sed "s/\"mode\":\"$m\"/\"mode\":\"pg-$as\"/" | tee -a "$RAW"
}

for r in $(seq "$RUNS"); do
  $L "$URL/toolq" "$N" | tee -a "$RAW"
  for m in enqueue drain enqueue-batch; do
    $W $m "$URL/toolq" "$N" "$CONC" | sed 's/"mode":"/"mode":"pg-/' | tee -a "$RAW"
  done
  $W latency "$URL/toolq" "$SAMPLES" "$CONC" | sed 's/"mode":"/"mode":"pg-/' | tee -a "$RAW"
  $W latency-xproc "$URL/toolq" "$SAMPLES" "$CONC" | sed 's/"mode":"/"mode":"pg-/' | tee -a "$RAW"
  drain_procs 1 | tee -a "$RAW"
  drain_procs 4 | tee -a "$RAW"
  if [ "${BENCH_SESSIONS:-1}" != 0 ]; then
    # Many sessions and many hosts (issue 38), as in run.sh: the one-session drain of a
    # batch-enqueued database right before them is drain-sessions' reference in its round.
    pgm enqueue-batch "$N" enqueue-batch-beside-sessions > /dev/null
    pgm drain "$N" drain-beside-sessions
    for m in drain-sessions drain-sessions-64 drain-sessions-procs-1 drain-sessions-procs-4; do pgm $m "$N"; done
    for m in drain-sleep-procs-1 drain-sleep-procs-4; do pgm $m "${BENCH_SLEEP_N:-8000}"; done
  fi
  if [ "${BENCH_COMPOSE:-1}" != 0 ]; then
    # Composition (issue 36), as in run.sh: plain enqueue-batch + drain before and after the
    # composed modes (each on an emptied database), a chain, one big batch beside plain.
    pgm enqueue-batch "$N" enqueue-batch-beside-compose
    pgm drain "$N" drain-beside-compose
    pgm batch-enqueue "$N"
    pgm drain-batch "$N"
    pgm drain-blocked "$N"
    pgm enqueue-batch "$N" enqueue-batch-beside-compose
    pgm drain "$N" drain-beside-compose
    pgm chain "${BENCH_CHAIN_N:-1000}"
    BN=${BENCH_PG_BATCH_N:-${BENCH_BATCH_N:-100000}}
    if [ "$BN" != 0 ]; then
      pgm enqueue-batch "$BN" enqueue-batch-big
      pgm drain "$BN" drain-big-plain
      pgm enqueue-batch-all "$BN"
      pgm batch-enqueue-all "$BN"
      pgm drain-batch "$BN" drain-batch-all
    fi
  fi
  if [ -n "$GW" ]; then
    for m in enqueue drain enqueue-batch; do
      $GW $m "$URL/graphile" "$N" "$CONC" | sed 's/"mode":"/"mode":"graphile-/' | tee -a "$RAW"
    done
    $GW latency "$URL/graphile" "$SAMPLES" "$CONC" | sed 's/"mode":"/"mode":"graphile-/' | tee -a "$RAW"
  fi
  if [ -n "$PB" ]; then
    # pg-boss in a database of its own, the same modes as Graphile Worker; latency over fewer
    # samples (each waits out most of pg-boss's 2 s polling interval).
    for m in enqueue drain enqueue-batch; do
      $PB $m "$URL/pgboss" "$N" "$CONC" | sed 's/"mode":"/"mode":"pgboss-/' | tee -a "$RAW"
    done
    $PB latency "$URL/pgboss" "$PB_SAMPLES" "$CONC" | sed 's/"mode":"/"mode":"pgboss-/' | tee -a "$RAW"
  fi
done

python3 - "$RAW" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(mode, key, **match):
    xs = [r[key] for r in rows if r.get("mode") == mode and r.get(key) is not None
          and all(r.get(k) == v for k, v in match.items())]
    return statistics.median(xs) if xs else None
ins, life, batch = (med("pg-limit", k) for k in ("insert_commits_per_s", "lifecycle_per_s", "batched_lifecycle_per_s"))
print("\n## Postgres medians")
print(f"raw Postgres: insert commits/s {ins:,.0f}; lifecycle/s {life:,.0f}; batched lifecycle/s {batch:,.0f}")
def line(label, v, unit, ref=None, refname=""):
    if v is None: return
    ratio = f"  ({v/ref:.2f}x {refname})" if ref else ""
    print(f"{label:<26} {v:>12,.1f} {unit}{ratio}")
line("enqueue", med("pg-enqueue", "rate"), "jobs/s", ins, "insert limit")
line("enqueue-batch", med("pg-enqueue-batch", "rate"), "jobs/s", batch, "batched lifecycle")
line("drain", med("pg-drain", "rate"), "jobs/s", batch, "batched lifecycle")
line("drain peak RSS", med("pg-drain", "peak_rss_kib"), "KiB")
line("latency p50", med("pg-latency", "p50_ms"), "ms")
line("latency p99", med("pg-latency", "p99_ms"), "ms")
line("latency-xproc p50", med("pg-latency-xproc", "p50_ms"), "ms")
line("latency-xproc p99", med("pg-latency-xproc", "p99_ms"), "ms")
one, four = med("pg-drain-procs", "rate", procs=1), med("pg-drain-procs", "rate", procs=4)
line("CLI drain, 1 process", one, "runs/s")
line("CLI drain, 4 processes", four, "runs/s", one, "1 process")
for m in ("enqueue", "enqueue-batch", "drain"):
    g, t = med("graphile-" + m, "rate"), med("pg-" + m, "rate")
    if g: print(f"{'graphile-worker ' + m:<26} {g:>12,.1f} jobs/s  (toolq {t/g:.2f}x graphile-worker)")
line("graphile-worker latency p50", med("graphile-latency", "p50_ms"), "ms")
line("graphile-worker drain RSS", med("graphile-drain", "peak_rss_kib"), "KiB")
for m in ("enqueue", "enqueue-batch", "drain"):
    b, t = med("pgboss-" + m, "rate"), med("pg-" + m, "rate")
    if b: print(f"{'pg-boss ' + m:<26} {b:>12,.1f} jobs/s  (toolq {t/b:.2f}x pg-boss)")
line("pg-boss latency p50", med("pgboss-latency", "p50_ms"), "ms")
line("pg-boss drain RSS", med("pgboss-drain", "peak_rss_kib"), "KiB")
# Many sessions and many hosts (issue 38): each ratio within its round, then the median.
def paired(a, b):
    xs = [r["rate"] for r in rows if r.get("mode") == "pg-" + a]
    ys = [r["rate"] for r in rows if r.get("mode") == "pg-" + b]
    return [y / x for x, y in zip(xs, ys) if x]
def target(label, ratios, goal):
    if not ratios: return
    m = statistics.median(ratios)
    print(f"{label:<26} {' / '.join(f'{r:.2f}' for r in ratios)}  (median {m:.2f}x; target >= {goal}: {'met' if m >= goal else 'NOT MET'})")
one_sess = med("pg-drain-beside-sessions", "rate")
line("drain, one session", one_sess, "jobs/s")
line("drain-sessions", med("pg-drain-sessions", "rate"), "jobs/s", one_sess, "one session")
line("drain-sessions-64", med("pg-drain-sessions-64", "rate"), "jobs/s", one_sess, "one session")
line("sessions, 1 process", med("pg-drain-sessions-procs-1", "rate"), "jobs/s", one_sess, "one session")
line("sessions, 4 processes", med("pg-drain-sessions-procs-4", "rate"), "jobs/s", med("pg-drain-sessions-procs-1", "rate"), "1 process")
line("sleep 20 ms, 1 process", med("pg-drain-sleep-procs-1", "rate"), "runs/s")
line("sleep 20 ms, 4 processes", med("pg-drain-sleep-procs-4", "rate"), "runs/s", med("pg-drain-sleep-procs-1", "rate"), "1 process")
target("sessions / one session", paired("drain-beside-sessions", "drain-sessions"), 0.9)
target("sessions-64 / one session", paired("drain-beside-sessions", "drain-sessions-64"), 0.9)
target("sessions 4 / 1 process", paired("drain-sessions-procs-1", "drain-sessions-procs-4"), 0.95)
target("sleep 4 / 1 process", paired("drain-sleep-procs-1", "drain-sleep-procs-4"), 3.5)
# Composition (issue 36): each composed figure over the plain ones of its own round.
def rates(mode):
    return [r["rate"] for r in rows if r.get("mode") == mode and r.get("rate")]
def by_round(composed, plain, per_round=2):
    ys, xs = rates("pg-" + composed), rates("pg-" + plain)
    out = []
    for k, y in enumerate(ys):
        ref = xs[per_round * k : per_round * (k + 1)]
        if ref: out.append(y / (sum(ref) / len(ref)))
    return out
def show(label, ratios, goal):
    if not ratios: return
    m = statistics.median(ratios)
    print(f"{label:<26} {' / '.join(f'{r:.2f}' for r in ratios)}  (median {m:.2f}x; target >= {goal}: {'met' if m >= goal else 'NOT MET'})")
plain_e, plain_d = med("pg-enqueue-batch-beside-compose", "rate"), med("pg-drain-beside-compose", "rate")
line("batch-enqueue", med("pg-batch-enqueue", "rate"), "jobs/s", plain_e, "plain enqueue-batch beside it")
line("drain-batch", med("pg-drain-batch", "rate"), "jobs/s", plain_d, "plain drain beside it")
line("drain-blocked", med("pg-drain-blocked", "rate"), "jobs/s", plain_d, "plain drain beside it")
line("chain per link", med("pg-chain", "per_link_ms"), "ms")
line("batch-enqueue-all", med("pg-batch-enqueue-all", "rate"), "jobs/s", med("pg-enqueue-batch-big", "rate"), "plain, 1,000 per call")
line("  plain, 1 call", med("pg-enqueue-batch-all", "rate"), "jobs/s", med("pg-enqueue-batch-big", "rate"), "plain, 1,000 per call")
line("drain-batch-all", med("pg-drain-batch-all", "rate"), "jobs/s", med("pg-drain-big-plain", "rate"), "plain drain of as many")
show("batch-enqueue / plain", by_round("batch-enqueue", "enqueue-batch-beside-compose"), 0.8)
show("drain-batch / plain", by_round("drain-batch", "drain-beside-compose"), 0.8)
show("big batch enqueue / plain", by_round("batch-enqueue-all", "enqueue-batch-big", 1), 0.8)
show("big batch drain / plain", by_round("drain-batch-all", "drain-big-plain", 1), 0.8)
show("drain-blocked / plain", by_round("drain-blocked", "drain-beside-compose"), 0.9)
PY
