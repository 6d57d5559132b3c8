"""WORKLOAD.md adapter for DBOS Transact (PyPI dbos) on its SQLite system database, a peer that
bench/run.sh measures beside toolq and plainjob.

    .venv/bin/python adapter.py <enqueue|enqueue-batch|drain|latency|latency-xproc> <db-path> <count> <concurrency>

Prints one JSON line on stdout, everything else on stderr. Public API only: DBOS(config=...),
@DBOS.workflow, DBOS.register_queue, Queue.enqueue, DBOS.listen_queues, DBOS.launch,
DBOS.list_workflows, and DBOSClient.enqueue_in_transaction for the batch. The job is a no-op
workflow (no steps) that counts itself; the system database is the file at <db-path>
(system_database_url "sqlite:///<db-path>"), which DBOS opens with SQLite's defaults: it sets only
busy_timeout and foreign_keys, so the journal is a rollback journal and synchronous is FULL, as
the JSON line reports.

The queue has worker_concurrency = <concurrency> (at most that many of its workflows run in this
process at once). A DBOS queue worker polls every polling_interval_sec (default 1 s) and each
poll claims up to the free slots, so with the default the drain could not pass 16 workflows/s:
the adapter sets polling_interval_sec to DBOS_POLL_SEC (default 0.01) and reports it, as the
plainjob adapter reports its poll interval.

enqueue: Queue.enqueue one call at a time, in a process that launched DBOS with
listen_queues([]) so that it never runs what it enqueues. enqueue-batch: DBOS has no batch
enqueue call; DBOSClient.enqueue_in_transaction enqueues inside a caller-owned SQLAlchemy
transaction on the system database, so each batch of 1,000 is 1,000 such calls in one
transaction (one commit). drain: a new process on the file enqueue left; the clock stops when the
handler ran N times and list_workflows finds no workflow that is not SUCCESS.
"""

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time

# DBOS logs to stderr; keep stdout for the one JSON line even if something prints.
_stdout = sys.stdout
sys.stdout = sys.stderr

import sqlalchemy as sa  # noqa: E402  (installed with dbos)
from dbos import DBOS, DBOSClient  # noqa: E402
from importlib.metadata import version as pkg_version  # noqa: E402

QUEUE = "noop"
WORKFLOW = "noop"
POLL_SEC = float(os.environ.get("DBOS_POLL_SEC", "0.01"))


def usage():
    print("usage: adapter.py <enqueue|enqueue-batch|drain|latency|latency-xproc> <db-path> <count> <concurrency>", file=sys.stderr)
    sys.exit(2)


if len(sys.argv) < 4:
    usage()
MODE, DB_PATH = sys.argv[1], os.path.abspath(sys.argv[2])
try:
    COUNT = int(sys.argv[3])
    CONCURRENCY = int(sys.argv[4]) if len(sys.argv) > 4 else 16
except ValueError:
    usage()
if COUNT <= 0 or CONCURRENCY <= 0:
    usage()
URL = f"sqlite:///{DB_PATH}"

handled = 0
handled_lock = threading.Lock()
starts = {}


def payload(i):
    return {"kind": "noop", "i": i, "pad": "0123456789abcdef"}


@DBOS.workflow(name=WORKFLOW)
def noop(p):
    t = time.monotonic_ns()
    global handled
    if p["kind"] != "noop":
        raise ValueError("bad payload")
    with handled_lock:
        handled += 1
        starts[p["i"]] = t


def fresh():
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(DB_PATH + suffix)
        except FileNotFoundError:
            pass


def launch(listen):
    """Constructs and launches DBOS on the file; `listen` False: this process never dequeues."""
    DBOS(config={"name": "toolq-bench", "system_database_url": URL, "log_level": "WARNING"})
    if not listen:
        DBOS.listen_queues([])
    DBOS.launch()
    return DBOS.register_queue(QUEUE, worker_concurrency=CONCURRENCY, polling_interval_sec=POLL_SEC)


def info():
    """The file's journal mode and the synchronous level a connection with SQLite's defaults gets
    (DBOS sets neither), from the same SQLite library DBOS's driver uses."""
    c = sqlite3.connect(DB_PATH)
    try:
        journal = c.execute("PRAGMA journal_mode").fetchone()[0]
        sync = ["OFF", "NORMAL", "FULL", "EXTRA"][c.execute("PRAGMA synchronous").fetchone()[0]]
    finally:
        c.close()
    return {
        "journal_mode": journal,
        "synchronous": sync,
        "sqlite": sqlite3.sqlite_version,
        "system": "dbos",
        "version": pkg_version("dbos"),
        "poll_interval_ms": POLL_SEC * 1000,
    }


def peak_rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def emit(obj):
    _stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    _stdout.flush()


def enqueue(batch):
    fresh()
    queue = launch(listen=False)
    client = engine = None
    if batch:
        client = DBOSClient(system_database_url=URL)
        engine = sa.create_engine(URL)
    t0 = time.monotonic()
    if batch:
        options = {"queue_name": QUEUE, "workflow_name": WORKFLOW}
        for i in range(0, COUNT, batch):
            with engine.begin() as conn:
                for j in range(i, min(i + batch, COUNT)):
                    client.enqueue_in_transaction(conn, options, payload(j))
    else:
        for i in range(COUNT):
            queue.enqueue(noop, payload(i))
    secs = time.monotonic() - t0
    if client:
        client.destroy()
        engine.dispose()
    DBOS.destroy()
    out = {"mode": "enqueue-batch" if batch else "enqueue", "n": COUNT, "secs": secs, "rate": COUNT / secs, **info()}
    if batch:
        out["batch"] = batch
    emit(out)


def unfinished():
    return len(DBOS.list_workflows(status=["ENQUEUED", "PENDING", "DELAYED"], load_input=False, load_output=False))


def drain():
    t0 = time.monotonic()
    launch(listen=True)
    while handled < COUNT:
        time.sleep(0.001)
    while unfinished() > 0:
        time.sleep(0.001)
    secs = time.monotonic() - t0
    done = len(DBOS.list_workflows(status="SUCCESS", load_input=False, load_output=False))
    DBOS.destroy()
    if done != COUNT:
        print(f"adapter.py: {done} of {COUNT} workflows SUCCESS after the drain", file=sys.stderr)
        sys.exit(1)
    emit({"mode": "drain", "n": COUNT, "concurrency": CONCURRENCY, "secs": secs, "rate": COUNT / secs, "handled": handled,
          "succeeded": done, "peak_rss_kib": peak_rss_kib(), **info()})


def gaps():
    """The idle gaps of WORKLOAD.md's latency mode: uniform in 0..=100 ms from a fixed xorshift64
    (the plainjob adapter's sequence), in seconds."""
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    while True:
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        yield (x % 100001) / 1e6


def latency(xproc):
    """The worker (queue thread, concurrency as given) warm for 1 s, then COUNT samples of enqueue
    -> handler start. latency-xproc: a child process (this script, mode `enqueuer`) enqueues each
    job and answers with its t0; time.monotonic_ns is CLOCK_MONOTONIC in both."""
    fresh()
    queue = launch(listen=True)
    child = None
    if xproc:
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "enqueuer", DB_PATH, "1", str(CONCURRENCY)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("enqueuer did not start")
    time.sleep(1.0)
    lat = []
    gap = gaps()
    for k in range(COUNT):
        time.sleep(next(gap))
        if child:
            child.stdin.write(f"{k}\n")
            child.stdin.flush()
            t0 = int(child.stdout.readline())
        else:
            t0 = time.monotonic_ns()
            queue.enqueue(noop, payload(k))
        while k not in starts:
            time.sleep(0.0001)
        lat.append((starts[k] - t0) / 1e6)
    if child:
        child.stdin.close()
        child.wait()
    DBOS.destroy()
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))]
    emit({"mode": "latency-xproc" if xproc else "latency", "samples": COUNT, "p50_ms": pct(50), "p99_ms": pct(99),
          "max_ms": lat[-1], **info()})


def enqueuer():
    """latency-xproc's other process: one Queue.enqueue per line on stdin, answered with t0."""
    queue = launch(listen=False)
    emit_line = lambda s: (_stdout.write(s + "\n"), _stdout.flush())
    emit_line("ready")
    for line in sys.stdin:
        t0 = time.monotonic_ns()
        queue.enqueue(noop, payload(int(line)))
        emit_line(str(t0))
    DBOS.destroy()


MODES = {
    "enqueue": lambda: enqueue(0),
    "enqueue-batch": lambda: enqueue(1000),
    "drain": drain,
    "latency": lambda: latency(False),
    "latency-xproc": lambda: latency(True),
    "enqueuer": enqueuer,
}
if MODE not in MODES:
    print(f"adapter.py: unknown mode {MODE!r} (enqueue, enqueue-batch, drain, latency, latency-xproc)", file=sys.stderr)
    sys.exit(2)
MODES[MODE]()
