#!/usr/bin/env bash
# The dashboard benchmark (issue 23): a database with COUNT runs (default 1,000,000) seeded
# through the library, then `toolq web` (the `dist` profile) answers every page REQUESTS times (default
# 200); prints p50/p99/max per page and the server's RSS (now and peak).
#
#   bench/web.sh [COUNT] [REQUESTS]     BENCH_DIR=... for the files (default bench/out)
#   BENCH_KEEP=1 reuses an existing bench/out/web.db of that COUNT
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-1000000}
REQUESTS=${2:-200}
DIR=${BENCH_DIR:-bench/out}
mkdir -p "$DIR"
DB="$DIR/web-$COUNT.db"
cargo build --profile dist --quiet --example web_bench --bin toolq
B=target/dist/examples/web_bench
T=target/dist/toolq
if [ "${BENCH_KEEP:-0}" != 1 ] || [ ! -f "$DB" ]; then
  rm -f "$DB" "$DB-wal" "$DB-shm" "$DB.mid"
  $B seed "$DB" "$COUNT"
fi
echo "# $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $COUNT runs; $(du -h "$DB" | cut -f1) database"
OUT="$DIR/web.out"
$T --db "$DB" web --listen 127.0.0.1:0 > "$OUT" &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "dashboard at" "$OUT" && break; sleep 0.1; done
URL=$(sed -n 's/^dashboard at \(http:[^ ]*\)\/$/\1/p' "$OUT")
$B measure "$URL" "$DB" "$REQUESTS"
echo "{\"rss_kib\": $(awk '/VmRSS/ {print $2}' /proc/$PID/status), \"peak_rss_kib\": $(awk '/VmHWM/ {print $2}' /proc/$PID/status)}"
