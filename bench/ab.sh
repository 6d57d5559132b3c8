#!/usr/bin/env bash
# Before and after, interleaved: the workload's enqueue, drain and enqueue-batch on REV's code
# and on the working tree's, alternating which goes first in each round, with the raw SQLite
# limit measured in every round. Prints each figure's runs and median, and new/base ratios.
# With AB_PG=1, each round also runs the same three modes on a throwaway Postgres server
# (bench/pg_server.sh) after the raw Postgres limit (examples/pg_limit).
# With AB_PICKUP=SAMPLES (e.g. 200), each round also measures the pickup latency (latency and
# latency-xproc, SAMPLES each, ~12 s per mode and version) on both.
#
#   bench/ab.sh REV [ROUNDS] [N]        (defaults: 4 rounds of 20,000 runs; BENCH_DIR as run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:?usage: bench/ab.sh REV [ROUNDS] [N]}
ROUNDS=${2:-4}
N=${3:-20000}
CONC=16
DIR=${BENCH_DIR:-bench/out}/ab
mkdir -p "$DIR"
if [ "$(stat -f -c %T "$DIR")" = tmpfs ]; then echo "bench/ab.sh: $DIR is on tmpfs; set BENCH_DIR to a real disk" >&2; exit 2; fi
BASE=$(mktemp -d -p "${TMPDIR:-/tmp}" toolq-ab.XXXXXX)
source bench/pg_server.sh
trap 'pg_server_stop; git worktree remove --force "$BASE/src" >/dev/null 2>&1 || true; rm -rf "$BASE"' EXIT
git worktree add --detach "$BASE/src" "$REV" >/dev/null
# A target directory each: in one shared directory the second build reused the first's
# binary (cargo keys a workspace package's artifacts without its path, and judged the working
# tree's files by the other checkout's build time), so "new" could be the base. Each keeps
# its dependencies between runs.
export CARGO_TARGET_DIR=$PWD/target/ab
# Both sides in their tuned build: the `dist` profile, or `release` for a REV from before the
# `dist` profile existed (issue 39), when `release` was the tuned build.
profile_of() { if grep -q '^\[profile.dist\]' "$1/Cargo.toml"; then echo dist; else echo release; fi; }
BP=$(profile_of "$BASE/src")
(cd "$BASE/src" && CARGO_TARGET_DIR="$CARGO_TARGET_DIR-base" cargo build --profile "$BP" --quiet --example workload)
cp "$CARGO_TARGET_DIR-base/$BP/examples/workload" "$BASE/base"
# The build script's symbol-order path is cached per target directory: make it this tree's.
touch build.rs
cargo build --profile dist --quiet --example workload --example sqlite_limit --example pg_limit
cp "$CARGO_TARGET_DIR/dist/examples/workload" "$BASE/new"
L=$CARGO_TARGET_DIR/dist/examples/sqlite_limit
PL=$CARGO_TARGET_DIR/dist/examples/pg_limit
PG=${AB_PG:-0}
[ "$PG" = 1 ] && pg_server_start "$DIR"
RAW="$DIR/ab.jsonl"
: > "$RAW"
tag() { sed "s/^/{\"v\":\"$1\",\"round\":$2,\"x\":/; s/\$/}/"; }
for r in $(seq "$ROUNDS"); do
  "$L" "$DIR" "$N" | tag raw "$r" >> "$RAW"
  order="base new"; [ $((r % 2)) = 0 ] && order="new base"
  for v in $order; do
    rm -f "$DIR/$v"-*.db*
    "$BASE/$v" enqueue "$DIR/$v-e.db" "$N" "$CONC" 2>/dev/null | tag "$v" "$r" >> "$RAW"
    "$BASE/$v" drain "$DIR/$v-e.db" "$N" "$CONC" 2>/dev/null | tag "$v" "$r" >> "$RAW"
    "$BASE/$v" enqueue-batch "$DIR/$v-b.db" "$N" "$CONC" 2>/dev/null | tag "$v" "$r" >> "$RAW"
    if [ "${AB_PICKUP:-0}" != 0 ]; then
      for m in latency latency-xproc; do
        "$BASE/$v" $m "$DIR/$v-l.db" "$AB_PICKUP" "$CONC" 2>/dev/null | tag "$v" "$r" >> "$RAW"
      done
    fi
  done
  [ "$PG" = 1 ] || continue
  fresh() { psql_admin "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1; psql_admin "CREATE DATABASE $1"; }
  fresh ab && "$PL" "$URL/ab" "$N" | tag pgraw "$r" >> "$RAW"
  for v in $order; do
    # As for SQLite's files: the drain drains what the enqueue made, the batch its own database.
    fresh ab_e && fresh ab_b
    for m in enqueue drain; do
      "$BASE/$v" $m "$URL/ab_e" "$N" "$CONC" 2>/dev/null | sed 's/"mode":"/"mode":"pg-/' | tag "$v" "$r" >> "$RAW"
    done
    "$BASE/$v" enqueue-batch "$URL/ab_b" "$N" "$CONC" 2>/dev/null | sed 's/"mode":"/"mode":"pg-/' | tag "$v" "$r" >> "$RAW"
  done
done
python3 - "$RAW" "$REV" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
raw = st.median(r["x"]["insert_commits_per_s"] for r in rows if r["v"] == "raw")
print(f"# base {sys.argv[2]} against the working tree; raw SQLite {raw:,.0f} commits/s (median)")
for mode in ["enqueue", "drain", "enqueue-batch"]:
    med = {}
    for v in ["base", "new"]:
        xs = [r["x"]["rate"] for r in rows if r["v"] == v and r["x"]["mode"] == mode]
        med[v] = st.median(xs)
        print(f"{mode:14} {v:4} median {med[v]:>9,.0f}/s ({med[v] / raw:.2f}x raw)  runs {[round(x) for x in xs]}")
    print(f"{mode:14} new/base {med['new'] / med['base']:.3f}")
for v in ["base", "new"]:
    kib = [r["x"]["peak_rss_kib"] for r in rows if r["v"] == v and r["x"]["mode"] == "drain"]
    print(f"drain peak RSS {v}: median {st.median(kib) / 1024:.2f} MiB, runs {kib}")
for mode in ["latency", "latency-xproc"]:
    for key in ["p50_ms", "p99_ms"]:
        med = {}
        for v in ["base", "new"]:
            xs = [r["x"][key] for r in rows if r["v"] == v and r["x"]["mode"] == mode]
            if xs:
                med[v] = st.median(xs)
                print(f"{mode + ' ' + key:20} {v:4} median {med[v]:.3f} ms  runs {xs}")
        if len(med) == 2 and med["base"]:
            print(f"{mode + ' ' + key:20} new/base {med['new'] / med['base']:.3f}")
pg = [r["x"]["batched_lifecycle_per_s"] for r in rows if r["v"] == "pgraw"]
if pg:
    ref = st.median(pg)
    print(f"# Postgres: raw batched lifecycle {ref:,.0f}/s (median)")
    for mode in ["pg-enqueue", "pg-drain", "pg-enqueue-batch"]:
        med = {}
        for v in ["base", "new"]:
            xs = [r["x"]["rate"] for r in rows if r["v"] == v and r["x"]["mode"] == mode]
            med[v] = st.median(xs)
            print(f"{mode:17} {v:4} median {med[v]:>9,.0f}/s ({med[v] / ref:.2f}x raw)  runs {[round(x) for x in xs]}")
        print(f"{mode:17} new/base {med['new'] / med['base']:.3f}")
PY
