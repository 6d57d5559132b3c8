#!/usr/bin/env bash
# Issue 39: what traces cost the drain. `toolq worker --drain` of N `echo` runs (the CLI's own
# path: config, built-in tool, inbox), with traces off and with traces on (OTLP/HTTP to a local
# sink that answers 200 and counts what it got), alternating which goes first in each round.
# Prints each drain's runs/s and the medians, and the on/off ratio.
#
#   bench/traces.sh [N] [ROUNDS]        (defaults: 20,000 runs, 3 rounds; BENCH_DIR as run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
ROUNDS=${2:-3}
DIR=${BENCH_DIR:-bench/out}/traces
mkdir -p "$DIR"
if [ "$(stat -f -c %T "$DIR")" = tmpfs ]; then echo "bench/traces.sh: $DIR is on tmpfs; set BENCH_DIR to a real disk" >&2; exit 2; fi
command -v python3 >/dev/null || { echo "bench/traces.sh: install Debian package python3" >&2; exit 2; }
cargo build --profile dist --quiet --bin toolq
T=${CARGO_TARGET_DIR:-target}/dist/toolq

# The sink: an OTLP/HTTP endpoint that accepts every export and counts requests and bytes.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 - "$PORT" "$DIR/sink.txt" <<'PY' &
import http.server, sys, threading
port, out = int(sys.argv[1]), sys.argv[2]
count = {"requests": 0, "bytes": 0}
lock = threading.Lock()
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        with lock:
            count["requests"] += 1
            count["bytes"] += n
            open(out, "w").write(f'{count["requests"]} {count["bytes"]}\n')
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
PY
SINK=$!
trap 'kill $SINK 2>/dev/null || true' EXIT
for i in $(seq 0 $((N - 1))); do echo "{\"tool\": \"echo\", \"args\": {\"message\": \"m$i\"}}"; done > "$DIR/runs.jsonl"

drain() { # off|on, round: one drain of a fresh file; prints a JSON line
  local db="$DIR/$1.db"
  rm -f "$db" "$db"-*
  "$T" --db "$db" enqueue --file "$DIR/runs.jsonl" >/dev/null
  local t0 t1
  t0=$(date +%s.%N)
  if [ "$1" = on ]; then
    TOOLQ_TRACES__ENABLED=true OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:$PORT/v1/traces" \
      "$T" --db "$db" worker --drain --concurrency 16 --per-session 16 2>/dev/null
  else
    "$T" --db "$db" worker --drain --concurrency 16 --per-session 16 2>/dev/null
  fi
  t1=$(date +%s.%N)
  python3 -c "print('{\"traces\": \"$1\", \"round\": $2, \"runs_per_sec\": %.0f}' % ($N / ($t1 - $t0)))"
}
RAW="$DIR/traces.jsonl"
: > "$RAW"
for r in $(seq "$ROUNDS"); do
  order="off on"; [ $((r % 2)) = 0 ] && order="on off"
  for v in $order; do drain "$v" "$r" | tee -a "$RAW"; done
done
python3 - "$RAW" "$DIR/sink.txt" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {v: statistics.median(r["runs_per_sec"] for r in rows if r["traces"] == v) for v in ("off", "on")}
sink = open(sys.argv[2]).read().split() if __import__("os").path.exists(sys.argv[2]) else ["0", "0"]
print(f'median drain: traces off {med["off"]:.0f} runs/s, on {med["on"]:.0f} runs/s, on/off {med["on"] / med["off"]:.3f}x; '
      f'the sink got {sink[0]} exports, {int(sink[1]):,} bytes')
PY
