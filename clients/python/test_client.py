"""Checks toolq_client.py against a running server (a worker on the same database).

    python3 test_client.py BASE_URL [batches|runs|all]

`batches` drives schedules and batches; `runs` drives enqueue, wait, result, signal and the
inbox stream (with one forced reconnect). Plain assertions: exit status 0 when all hold.
tests/it/api_python.rs runs it against a real `toolq web` and worker.
"""

import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from toolq_client import Client, ToolqError  # noqa: E402


def problem(call, status):
    """Calls `call`, which must raise ToolqError with `status`; answers the error."""
    try:
        got = call()
    except ToolqError as e:
        assert e.status == status, "expected %s, got %s: %s" % (status, e.status, e.problem)
        assert e.type.startswith("urn:toolq:problem:"), e.problem
        assert e.detail, e.problem
        return e
    raise AssertionError("expected a %s problem, got an answer: %r" % (status, got))


def schedules(c):
    session = "py-sched-" + uuid.uuid4().hex[:8]
    s = c.add_schedule(
        "echo", {"message": "tick"}, cron="*/5 * * * *", tz="Europe/Berlin", session=session
    )
    sid = s["id"]
    assert sid.startswith("sch_"), s
    assert s["timezone"] == "Europe/Berlin" and s["enabled"] is True, s
    assert [x["id"] for x in c.schedules(session=session)] == [sid]
    d = c.schedule(sid)
    assert d["schedule"] == s and len(d["next_fires"]) == 5, d
    assert c.disable_schedule(sid)["enabled"] is False
    assert c.enable_schedule(sid)["enabled"] is True
    done = c.cancel_schedule(sid)
    assert done["enabled"] is False and done["cancelled_at"], done
    e = problem(lambda: c.cancel_schedule(sid), 409)
    e = problem(lambda: c.add_schedule("echo", {"message": "x"}, cron="61 * * * *"), 400)
    assert (e.field, e.value) == ("cron", "61 * * * *"), e.problem
    e = problem(lambda: c.add_schedule("echo", {"message": "x"}, cron="0 * * * *", tz="Nowhere"), 400)
    assert (e.field, e.value) == ("tz", "Nowhere"), e.problem
    e = problem(lambda: c.schedule("bg_" + "0" * 32), 400)
    assert e.field == "schedule id", e.problem
    problem(lambda: c.schedule("sch_" + "0" * 32), 404)
    print("ok: schedules")


def batches(c):
    session = "py-batch-" + uuid.uuid4().hex[:8]
    b = c.create_batch(
        [
            {"tool": "echo", "args": {"message": "a"}, "ref": "a"},
            {"tool": "echo", "args": {"message": "b"}, "after": ["a"]},
        ],
        session=session,
        title="two",
        on_complete=("echo", {"message": "done"}),
    )
    bid = b["batch_id"]
    assert bid.startswith("bt_") and b["enqueued"] == 2 and len(b["ids"]) == 2, b
    assert c.batch(bid)["title"] == "two"
    assert [x["id"] for x in c.batches(session=session)] == [bid]
    w = c.wait_batch(bid, timeout=60)
    assert w["ended"] is True and w["completed"] == 2 and w["state"] == "completed", w
    assert w["callback_run_id"], w

    # Runs due in an hour: a wait times out, a cancel and a retry act on them.
    later = c.create_batch([{"tool": "echo", "args": {"message": "later"}, "in": "1h"}])
    lid = later["batch_id"]
    t = time.monotonic()
    w = c.wait_batch(lid, timeout=0.3)
    assert w["ended"] is False and w["pending"] == 1, w
    assert time.monotonic() - t >= 0.3
    dry = c.cancel_batch(lid, dry_run=True)
    assert dry["dry_run"] is True and dry["matched"] == 1, dry
    assert c.cancel_batch(lid)["cancelled"] == 1
    assert c.retry_batch(lid)["retried"] == 1
    # A retried run is due at once: the worker runs it, and the batch completes again.
    w = c.wait_batch(lid, timeout=60)
    assert w["ended"] is True and w["completed"] == 1, w

    e = problem(lambda: c.create_batch([]), 400)
    assert e.field == "runs", e.problem
    e = problem(lambda: c.create_batch([{"tool": "echo", "args": {"message": 1}}]), 400)
    assert e.field.startswith("runs[0]"), e.problem
    e = problem(lambda: c.batches(state="done"), 400)
    assert (e.field, e.value) == ("state", "done"), e.problem
    problem(lambda: c.batch("bt_" + "0" * 32), 404)
    print("ok: batches")


def runs(c):
    session = "py-" + uuid.uuid4().hex[:8]
    r = c.enqueue("echo", {"message": "hi"}, session=session)
    rid = r["id"]
    assert rid.startswith("bg_") and r["created"] is True, r
    w = c.wait(rid, timeout=60)
    assert w["ended"] is True and w["state"] == "completed", w
    assert c.get(rid)["state"] == "completed"
    assert "hi" in json.dumps(c.result(rid)), c.result(rid)
    assert isinstance(c.log(rid), str)

    # A run waiting for an event resumes with the signal's payload.
    a = c.enqueue("await_event", {"event": "go"}, session=session)
    c.signal(a["id"], "go", {"n": 41})
    w = c.wait(a["id"], timeout=60)
    assert w["state"] == "completed", w
    assert "41" in json.dumps(c.result(a["id"])), c.result(a["id"])

    many = c.enqueue_many(
        [
            {"tool": "echo", "args": {"message": "m1"}, "session": session},
            {"tool": "echo", "args": {"message": "m2"}, "session": session},
        ]
    )
    assert many["enqueued"] == 2 and len(many["ids"]) == 2, many
    for i in many["ids"]:
        assert c.wait(i, timeout=60)["ended"] is True

    # A wait with a timeout answers ended: false; a cancel ends the run.
    later = c.enqueue("echo", {"message": "later"}, session="py-later", in_="1h")
    w = c.wait(later["id"], timeout=0.5)
    assert w["ended"] is False, w
    c.cancel(later["id"])
    assert c.wait(later["id"], timeout=30)["state"] == "cancelled"

    e = problem(lambda: c.get("sch_" + "0" * 32), 400)
    assert e.field == "run id", e.problem
    e = problem(lambda: c.enqueue("nope"), 400)
    assert (e.field, e.value) == ("tool", "nope"), e.problem

    # The inbox stream: the 4 completion messages of this session, each once, in order,
    # across one dropped connection.
    stream = c.stream_inbox(session, last_event_id=0)
    got = []
    try:
        for msg in stream:
            got.append(msg)
            if len(got) == 1:
                stream.drop()
            if len(got) == 4:
                break
    finally:
        stream.close()
    ids = [m["id"] for m in got]
    assert ids == sorted(set(ids)), ids
    assert {m["run_id"] for m in got} == {rid, a["id"]} | set(many["ids"]), got
    assert all(m["session_id"] == session for m in got), got
    assert stream.reconnects == 1, stream.reconnects

    # Resuming after the second message gives the third and fourth only.
    again = c.stream_inbox(session, last_event_id=ids[1])
    rest = [next(again), next(again)]
    again.close()
    assert [m["id"] for m in rest] == ids[2:], rest

    assert c.ack(session, ids)["acknowledged"] == 4
    page = c.inbox(session)["messages"]
    assert {m["id"] for m in page} >= set(ids), page
    assert all(m["acked_at"] for m in page if m["id"] in ids), page
    assert c.inbox(session, unread=True)["messages"] == [], "all acknowledged"
    print("ok: runs and the inbox stream")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    c = Client(sys.argv[1])
    part = sys.argv[2] if len(sys.argv) > 2 else "all"
    if part in ("batches", "all"):
        schedules(c)
        batches(c)
    if part in ("runs", "all"):
        runs(c)
    print("all ok")


if __name__ == "__main__":
    main()
