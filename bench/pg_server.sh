# Sourced by bench/pg.sh and bench/ab.sh: `pg_server_start DIR` starts a throwaway Postgres
# server (the newest Debian postgresql, the server's default durability) in DIR/pg on a free
# local port, and sets BIN, PGDIR, PORT and URL; `psql_admin SQL`
# runs SQL on its postgres database; `pg_server_stop` stops it.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
psql_admin() { "$BIN/psql" -qAt "$URL/postgres" -c "$1"; }
pg_server_start() {
  local DIR=$1
  BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$BIN" ] || BIN=$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")
  if [ ! -x "$BIN/initdb" ]; then echo "bench: install Debian package postgresql (or set BENCH_PG=0)" >&2; exit 2; fi
  PGDIR=$(cd "$DIR" && pwd)/pg
  rm -rf "$PGDIR"
  mkdir -p "$PGDIR"
  [ "$(id -u)" = 0 ] && chown postgres "$PGDIR"
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  (cd "$PGDIR" && as_pg "$BIN/initdb" -D "$PGDIR/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null)
  (cd "$PGDIR" && as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w \
    -o "-p $PORT -k $PGDIR -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null)
  URL="postgres://postgres@127.0.0.1:$PORT"
}
# Stops the server pg_server_start started (callers run it from their EXIT trap).
pg_server_stop() {
  [ -n "${PGDIR:-}" ] || return 0
  (cd "$PGDIR" && as_pg "$BIN/pg_ctl" -D "$PGDIR/data" -m fast stop >/dev/null 2>&1) || true
}
