"""An agent host's loop with toolq, in Python with nothing installed.

    toolq web &                 # or: toolq worker --web
    toolq worker &
    python3 example.py [http://127.0.0.1:8080] [TOKEN]

It enqueues a few runs and a batch in one session, then reads that session's completion
messages as the server pushes them, acknowledging each, until the batch's message arrives.
"""

import sys
import uuid

from toolq_client import Client, ToolqError


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
    token = sys.argv[2] if len(sys.argv) > 2 else None
    tq = Client(url, token=token)
    session = "example-" + uuid.uuid4().hex[:8]

    # One run, waited for (a long poll, repeated until the run ended).
    run = tq.enqueue("echo", {"message": "hello"}, session=session)
    done = tq.wait(run["id"], timeout=60)
    print("run", run["id"], done["state"], tq.result(run["id"]))

    # A run that waits for an event, and the event.
    waiting = tq.enqueue("await_event", {"event": "approved"}, session=session)
    tq.signal(waiting["id"], "approved", {"by": "example.py"})

    # A batch: b runs after a; a callback once both are final.
    batch = tq.create_batch(
        [
            {"tool": "echo", "args": {"message": "a"}, "ref": "a"},
            {"tool": "echo", "args": {"message": "b"}, "after": ["a"]},
        ],
        session=session,
        title="example batch",
        on_complete=("echo", {"message": "batch done"}),
    )
    print("batch", batch["batch_id"], "with runs", ", ".join(batch["ids"]))

    # Bad input is an exception naming the field and value.
    try:
        tq.add_schedule("echo", {"message": "x"}, cron="61 * * * *")
    except ToolqError as e:
        print("refused:", e.status, e.field, repr(e.value), "-", e.detail)

    # The session's messages as they commit; each once, across reconnects.
    stream = tq.stream_inbox(session, last_event_id=0)
    with stream:
        for msg in stream:
            print("message", msg["id"], msg["kind"], msg["body"])
            tq.ack(session, [msg["id"]])
            if msg["kind"] == "batch_completed":
                break


if __name__ == "__main__":
    main()
