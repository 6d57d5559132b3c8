#!/usr/bin/env bash
# P `toolq worker --drain` processes (concurrency 16) over S sessions on one throwaway Postgres
# server, for one or more toolq binaries alternating, with what each drain cost the server per
# run: WAL bytes and records (pg_current_wal_lsn, pg_stat_wal), WAL syncs, commits and server
# CPU (the postmaster's own and reaped children's times, and its live children's, from /proc).
# Issue 38's Postgres figures in BENCHMARKS.md ("Session 19") come from it.
#
#   bench/pg_procs.sh N "S PS P" ...        (BINS="name:/path/to/toolq ...", default
#                                            base-less: new:target/dist/toolq; ROUNDS=1)
#   e.g. BINS="base:/tmp/base/toolq new:target/dist/toolq" ROUNDS=2 \
#        bench/pg_procs.sh 20000 "1 16 1" "1 16 4" "50 5 4" "50 16 4"
# S sessions (runs round-robin over them), PS the per-session limit, P worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: bench/pg_procs.sh N "SESSIONS PER_SESSION PROCS" ...}
shift
[ $# -gt 0 ] || { echo 'usage: bench/pg_procs.sh N "SESSIONS PER_SESSION PROCS" ...' >&2; exit 2; }
BINS=${BINS:-new:target/dist/toolq}
ROUNDS=${ROUNDS:-1}
DIR=${BENCH_DIR:-bench/out}
mkdir -p "$DIR"
source bench/pg_server.sh
trap pg_server_stop EXIT
pg_server_start "$DIR"
export PATH="$BIN:$PATH"
PM_PID_FILE="$PGDIR/data/postmaster.pid"

# Server CPU so far, in clock ticks: the postmaster with its reaped children, and the live ones.
server_ticks() {
  local pm tot p
  pm=$(head -1 "$PM_PID_FILE")
  tot=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do
    # A backend may exit between the listing and the read (its time then is the postmaster's).
    tot=$((tot + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$tot"
}
snap() {
  psql -qAt "$URL/procs" -c "SELECT pg_current_wal_lsn(), (SELECT wal_records FROM pg_stat_wal), \
    (SELECT wal_sync FROM pg_stat_wal), (SELECT xact_commit FROM pg_stat_database WHERE datname = 'procs')"
}

for _ in $(seq "$ROUNDS"); do
  for spec in "$@"; do
    read -r S PS P <<<"$spec"
    python3 -c "
import json
for i in range($N): print(json.dumps({'tool': 'echo', 'session': 's%d' % (i % $S), 'args': {'message': 'noop %d' % i}}))" \
      > "$PGDIR/jobs.jsonl"
    for b in $BINS; do
      name=${b%%:*} T=${b#*:}
      psql_admin "DROP DATABASE IF EXISTS procs WITH (FORCE)" && psql_admin "CREATE DATABASE procs"
      "$T" --db "$URL/procs" enqueue --file "$PGDIR/jobs.jsonl" >/dev/null
      a=$(snap) c0=$(server_ticks) t0=$(date +%s.%N)
      for _ in $(seq "$P"); do
        TOOLQ_WORKER__CONCURRENCY=16 TOOLQ_WORKER__PER_SESSION=$PS TOOLQ_RETENTION__ENABLED=false \
          "$T" --db "$URL/procs" worker --drain 2>/dev/null &
      done
      wait
      t1=$(date +%s.%N) c1=$(server_ticks)
      sleep 1 # the statistics of the last backends reach pg_stat_* after they exit
      b_=$(snap)
      done_=$(psql -qAt "$URL/procs" -c "SELECT count(*) FROM runs WHERE state = 'completed'")
      python3 - "$name" "$S" "$PS" "$P" "$N" "$done_" "$a" "$b_" "$c0" "$c1" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
name, s, ps, p, n, done = sys.argv[1], *map(int, sys.argv[2:7])
a, b = sys.argv[7].split("|"), sys.argv[8].split("|")
c0, c1, t0, t1, hz = int(sys.argv[9]), int(sys.argv[10]), float(sys.argv[11]), float(sys.argv[12]), int(sys.argv[13])
lsn = lambda x: (int(x.split("/")[0], 16) << 32) + int(x.split("/")[1], 16)
print(json.dumps({
    "mode": "pg-procs", "bin": name, "sessions": s, "per_session": ps, "procs": p, "n": n,
    "completed": done, "rate": round(n / (t1 - t0), 1),
    "wal_bytes_per_run": round((lsn(b[0]) - lsn(a[0])) / n),
    "wal_records_per_run": round((int(b[1]) - int(a[1])) / n, 1),
    "wal_syncs_per_run": round((int(b[2]) - int(a[2])) / n, 3),
    "commits_per_run": round((int(b[3]) - int(a[3])) / n, 3),
    "server_cpu_us_per_run": round((c1 - c0) * 1e6 / hz / n),
}))
PY
    done
  done
done
