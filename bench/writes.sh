#!/usr/bin/env bash
# Writes per run: what a drain of N echo runs (`toolq worker --drain`) writes, per run.
#
#   bench/writes.sh [N] [TOOLQ]        N runs (default 2000); TOOLQ the binary (default
#                                      target/debug/toolq: the counts do not depend on the profile)
#   BENCH_PG=0 bench/writes.sh         SQLite only
#
# SQLite, two drains of N runs, each on a fresh file:
#   1. counts: triggers (added after the enqueue, before the drain) record every row insert,
#      update and delete per table, and the index entries each touches: an insert or delete
#      touches every index whose condition holds for the row, an update every index that holds
#      a changed column (or whose condition changed) and whose condition holds before or after.
#   2. WAL: a reader holds a snapshot taken before the drain, so no checkpoint can reset or
#      fill past the WAL; the frames the drain appends are counted per b-tree (dbstat maps
#      page numbers to tables and indexes), and so are its commits.
# Postgres (a throwaway server, bench/pg_server.sh): one drain; the row writes per table from
# pg_stat_user_tables (inserts, updates, of which HOT, deletes), and the WAL from
# pg_current_wal_lsn() (bytes) and pg_stat_wal (records, full-page images), after a CHECKPOINT.
# Everything a drain writes counts (worker registration, heartbeats), divided by N.
set -euo pipefail
N=${1:-2000}
TOOLQ=${2:-target/debug/toolq}
TOOLQ=$(cd "$(dirname "$TOOLQ")" && pwd)/$(basename "$TOOLQ")
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d /tmp/toolq-writes.XXXXXX)
chmod 755 "$DIR"  # the Postgres server runs as its own user
cleanup() { [ -n "${READER:-}" ] && kill "$READER" 2>/dev/null; pg_server_stop 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT

python3 -c "
import json
with open('$DIR/runs.jsonl', 'w') as f:
    for i in range($N):
        f.write(json.dumps({'tool': 'echo', 'args': {'message': 'm%d' % i}, 'session': 'w'}) + '\n')
"

seed() { # $1 database: a fresh one with N queued echo runs
  "$TOOLQ" --db "$1" enqueue --file "$DIR/runs.jsonl" >/dev/null
}
drain() {
  TOOLQ_WORKER__CONCURRENCY=16 "$TOOLQ" --db "$1" worker --drain >/dev/null 2>"$DIR/worker.log" \
    || { cat "$DIR/worker.log" >&2; exit 1; }
}

# --- SQLite: row writes and index entries ---------------------------------------------------
seed "$DIR/a.db"
python3 - "$DIR/a.db" <<'EOF'
import re, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("CREATE TABLE _writes (tbl TEXT, op TEXT, idx INTEGER)")
tables = [r[0] for r in c.execute(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '_writes'")]
def outside_strings(text, f):
    parts = re.split(r"('(?:[^']|'')*')", text)
    return "".join(p if p.startswith("'") else f(p) for p in parts)
for t in tables:
    cols = [r[1] for r in c.execute(f"PRAGMA table_info('{t}')")]
    word = re.compile(r"\b(" + "|".join(map(re.escape, cols)) + r")\b") if cols else None
    without_rowid = 'WITHOUT ROWID' in (c.execute(
        "SELECT sql FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0] or '').upper()
    idx = []
    for _, name, unique, origin, partial in c.execute(f"PRAGMA index_list('{t}')").fetchall():
        if without_rowid and origin == 'pk':
            continue  # the table itself
        sql = c.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
        if sql:
            body = sql[sql.index('(', sql.upper().index(' ON ')):]
            m = re.search(r"\)\s+WHERE\s+(.*)$", body, re.S | re.I)
            pred = m.group(1) if m else None
            keys = body[:m.start() + 1] if m else body
            used = set(word.findall(outside_strings(body, lambda s: s)))
        else:
            pred = None
            used = {r[2] for r in c.execute(f"PRAGMA index_xinfo('{name}')") if r[5] and r[2]}
        idx.append((pred, used))
    def cond(pred, row):
        if pred is None:
            return "1"
        return "(" + outside_strings(pred, lambda s: word.sub(lambda m: f'{row}."{m.group(1)}"', s)) + ")"
    ins = " + ".join(f"(CASE WHEN {cond(p, 'new')} THEN 1 ELSE 0 END)" for p, _ in idx) or "0"
    dele = " + ".join(f"(CASE WHEN {cond(p, 'old')} THEN 1 ELSE 0 END)" for p, _ in idx) or "0"
    upd_terms = []
    for p, used in idx:
        changed = " OR ".join(f'new."{u}" IS NOT old."{u}"' for u in sorted(used)) or "0"
        upd_terms.append(f"(CASE WHEN ({cond(p, 'old')} OR {cond(p, 'new')}) AND ({changed}) THEN 1 ELSE 0 END)")
    upd = " + ".join(upd_terms) or "0"
    c.execute(f"CREATE TRIGGER _w_{t}_i AFTER INSERT ON \"{t}\" BEGIN INSERT INTO _writes VALUES ('{t}', 'insert', {ins}); END")
    c.execute(f"CREATE TRIGGER _w_{t}_u AFTER UPDATE ON \"{t}\" BEGIN INSERT INTO _writes VALUES ('{t}', 'update', {upd}); END")
    c.execute(f"CREATE TRIGGER _w_{t}_d AFTER DELETE ON \"{t}\" BEGIN INSERT INTO _writes VALUES ('{t}', 'delete', {dele}); END")
c.commit()
EOF
drain "$DIR/a.db"
echo "SQLite, $N echo runs, per run:"
python3 - "$DIR/a.db" "$N" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); n = int(sys.argv[2])
rows = c.execute("SELECT tbl, sum(op = 'insert'), sum(op = 'update'), sum(op = 'delete'), sum(idx) "
                 "FROM _writes GROUP BY tbl ORDER BY tbl").fetchall()
print(f"  {'table':<16} {'inserts':>8} {'updates':>8} {'deletes':>8} {'index entries':>14}")
tot = [0, 0, 0, 0]
for t, i, u, d, x in rows:
    print(f"  {t:<16} {i/n:8.3f} {u/n:8.3f} {d/n:8.3f} {x/n:14.3f}")
    tot = [a + b for a, b in zip(tot, (i, u, d, x))]
print(f"  {'all':<16} {tot[0]/n:8.3f} {tot[1]/n:8.3f} {tot[2]/n:8.3f} {tot[3]/n:14.3f}"
      f"   (row writes {sum(tot[:3])/n:.3f})")
EOF

# --- SQLite: WAL frames -------------------------------------------------------------------
seed "$DIR/b.db"
mkfifo "$DIR/hold"
python3 - "$DIR/b.db" "$DIR/hold" <<'EOF' &
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN"); c.execute("SELECT count(*) FROM runs").fetchone()
print("  (reader holds the WAL)", file=sys.stderr, flush=True)
open(sys.argv[2]).read()  # until the fifo is written and closed
EOF
READER=$!
sleep 1
walpos() { python3 -c "import os,sys; p=sys.argv[1]+'-wal'; print(os.path.getsize(p) if os.path.exists(p) else 0)" "$1"; }
W0=$(walpos "$DIR/b.db")
drain "$DIR/b.db"
python3 - "$DIR/b.db" "$N" "$W0" <<'EOF'
import sqlite3, struct, sys, collections
db, n, w0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = sqlite3.connect(db)
page = c.execute("PRAGMA page_size").fetchone()[0]
names = dict(c.execute("SELECT pageno, name FROM dbstat"))
data = open(db + "-wal", "rb").read()
start = max(w0, 32)
frames, commits, per = 0, 0, collections.Counter()
for off in range(start, len(data) - page - 23, page + 24):
    pgno, size = struct.unpack(">II", data[off:off + 8])
    frames += 1
    commits += size != 0
    per[names.get(pgno, "(free/other)")] += 1
print(f"  WAL frames {frames/n:.2f} per run ({page}-byte pages), commits {commits/n:.3f} per run, "
      f"frames per commit {frames/max(commits,1):.1f}")
print("  frames per run by b-tree: " + ", ".join(f"{k} {v/n:.2f}" for k, v in per.most_common()))
EOF
echo done > "$DIR/hold"; wait "$READER" 2>/dev/null || true; READER=

# --- Postgres -----------------------------------------------------------------------------
if [ "${BENCH_PG:-1}" != 0 ]; then
  source "$HERE/pg_server.sh"
  pg_server_start "$DIR"
  psql_admin "CREATE DATABASE writes" >/dev/null
  DB="$URL/writes"
  seed "$DB"
  q() { "$BIN/psql" -qAt "$DB" -c "$1"; }
  q "CHECKPOINT"
  q "SELECT pg_stat_reset(); SELECT pg_stat_reset_shared('wal');" >/dev/null
  L0=$(q "SELECT pg_current_wal_lsn()")
  drain "$DB"
  L1=$(q "SELECT pg_current_wal_lsn()")
  sleep 1.5  # the backends' stats reach shared memory within a second
  echo "Postgres, $N echo runs, per run:"
  q "SELECT pg_stat_force_next_flush()" >/dev/null 2>&1 || true
  "$BIN/psql" -qAt -F ' ' "$DB" -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
      (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid)
    FROM pg_stat_user_tables s WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname" |
  python3 -c "
import sys
n = $N
print(f\"  {'table':<16} {'inserts':>8} {'updates':>8} {'of them HOT':>11} {'deletes':>8} {'indexes':>7}\")
tot = [0, 0, 0, 0]
for line in sys.stdin:
    t, i, u, h, d, x = line.split()
    i, u, h, d = map(int, (i, u, h, d))
    print(f'  {t:<16} {i/n:8.3f} {u/n:8.3f} {h/n:11.3f} {d/n:8.3f} {x:>7}')
    tot = [a + b for a, b in zip(tot, (i, u, h, d))]
print(f\"  {'all':<16} {tot[0]/n:8.3f} {tot[1]/n:8.3f} {tot[2]/n:11.3f} {tot[3]/n:8.3f}   (row writes {(tot[0]+tot[1]+tot[3])/n:.3f})\")
"
  q "SELECT '  WAL ' || round(pg_wal_lsn_diff('$L1', '$L0') / $N.0) || ' bytes per run; '
      || round(wal_records / $N.0, 2) || ' records, ' || round(wal_fpi / $N.0, 3) || ' full-page images per run'
      FROM pg_stat_wal"
fi
