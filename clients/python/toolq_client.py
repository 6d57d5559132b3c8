"""A client for toolq's HTTP API (``/api/v1``), standard library only (Python 3.9+).

Install: copy this one file next to your code. Nothing else to install.

    from toolq_client import Client, ToolqError

    tq = Client("http://127.0.0.1:8080")          # token=... off loopback
    run = tq.enqueue("echo", {"message": "hi"}, session="agent-1")
    done = tq.wait(run["id"], timeout=60)          # long polls until the run ended
    print(done["state"], tq.result(run["id"]))

    for msg in tq.stream_inbox("agent-1"):         # Server-Sent Events, resumed on reconnect
        print(msg["id"], msg["kind"], msg["body"])
        tq.ack("agent-1", [msg["id"]])

Every answer is the JSON the CLI prints with ``--json``, as a dict (or list). An error answer
(RFC 9457 ``application/problem+json``) raises :class:`ToolqError` carrying its ``status``,
``type``, ``detail``, ``field`` and ``value``. Network failures raise the standard library's
``OSError`` subclasses (``urllib.error.URLError``, ``ConnectionError``, ``TimeoutError``).
"""

import http.client
import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "ToolqError", "InboxStream"]
__version__ = "1"

# The opening comment of an inbox stream: `: session "s", messages after 42`.
_STARTS_AFTER = re.compile(r"messages after (\d+)")

# The longest one long poll may hold a request; the server refuses longer ones.
_POLL = 30.0


class ToolqError(Exception):
    """An error answer of the API: an RFC 9457 problem.

    Attributes: ``status`` (the HTTP status), ``type`` (``urn:toolq:problem:...``),
    ``title``, ``detail`` (the message, naming the field and value), ``field`` and ``value``
    (for bad input; else None), ``instance`` (the request path) and ``problem`` (the whole
    answer as a dict).
    """

    def __init__(self, status, problem):
        self.status = status
        self.problem = problem
        self.type = problem.get("type")
        self.title = problem.get("title")
        self.detail = problem.get("detail") or problem.get("title") or "HTTP %s" % status
        self.field = problem.get("field")
        self.value = problem.get("value")
        self.instance = problem.get("instance")
        super().__init__("%s: %s" % (status, self.detail))


def _problem(status, raw):
    """The problem in an error answer's bytes (a plain one when it is not JSON)."""
    try:
        p = json.loads(raw.decode("utf-8"))
        if isinstance(p, dict):
            return p
    except ValueError:
        pass
    text = raw.decode("utf-8", "replace").strip()
    return {"type": "about:blank", "status": status, "detail": text or "HTTP %s" % status}


def _seconds(t):
    """A timeout as the API's duration text (``1500ms``)."""
    return "%dms" % max(1, int(round(t * 1000)))


def _spec(tool, args, fields):
    """A RunSpec body: ``in_``/``ref_`` (Python keywords) become ``in``/``ref``."""
    body = {"tool": tool}
    if args is not None:
        body["args"] = args
    for k, v in fields.items():
        if k in ("in_", "ref_"):
            k = k[:-1]
        body[k] = v
    return body


def _q(segment):
    """A path segment, percent-encoded (an id never escapes its segment)."""
    return urllib.parse.quote(str(segment), safe="")


class Client:
    """A toolq server's API: ``base_url`` is the dashboard's address (``toolq web`` or
    ``toolq worker --web``); ``token`` is sent as ``Authorization: Bearer`` (not needed on
    loopback). ``timeout`` bounds each plain request, in seconds."""

    def __init__(self, base_url="http://127.0.0.1:8080", token=None, timeout=60.0):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/api/v1"):
            self.base_url = self.base_url[: -len("/api/v1")]
        self.token = token
        self.timeout = timeout

    # ---- plumbing --------------------------------------------------------------------

    def _headers(self, extra=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if extra:
            h.update(extra)
        return h

    def url(self, path, query=None):
        """The whole address of ``path`` under ``/api/v1`` (None values left out of ``query``)."""
        u = self.base_url + "/api/v1" + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                u += "?" + urllib.parse.urlencode(
                    {k: str(v).lower() if isinstance(v, bool) else v for k, v in q.items()}
                )
        return u

    def _raw(self, method, path, body=None, query=None, timeout=None):
        """Sends a request; answers (content type, body bytes) or raises :class:`ToolqError`."""
        data = None
        headers = self._headers()
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        elif method == "POST":
            data = b""
        req = urllib.request.Request(self.url(path, query), data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                return r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            raise ToolqError(e.code, _problem(e.code, raw)) from None

    def request(self, method, path, body=None, query=None, timeout=None):
        """Any API call: answers its JSON (None when the answer is empty)."""
        _, raw = self._raw(method, path, body, query, timeout)
        if not raw:
            return None
        return json.loads(raw.decode("utf-8"))

    def _get(self, path, query=None, timeout=None):
        return self.request("GET", path, query=query, timeout=timeout)

    def _post(self, path, body=None, timeout=None):
        return self.request("POST", path, body=body if body is not None else {}, timeout=timeout)

    # ---- runs ------------------------------------------------------------------------

    def enqueue(self, tool, args=None, **fields):
        """Enqueues one run (``POST /runs``); ``fields`` are an enqueue file line's (``session``,
        ``title``, ``priority``, ``at``, ``in_``, ``timeout``, ``idempotency_key``, ``after``,
        ``ref_``, ...). Answers ``toolq enqueue --json``'s ``{"id", "created", ...}``."""
        return self._post("/runs", _spec(tool, args, fields))

    def enqueue_many(self, runs):
        """Enqueues runs in one transaction, all or none (``POST /runs/many``). Each run is a
        dict of RunSpec fields (``{"tool": ..., "args": ...}``). Answers ``{"enqueued",
        "created", "ids", "runs"}``."""
        return self._post("/runs/many", {"runs": list(runs)})

    def get(self, run_id):
        """A run, as ``toolq show --json`` prints it."""
        return self._get("/runs/%s" % _q(run_id))

    def _long_poll(self, path, timeout, poll):
        """Repeats the long poll ``GET path?timeout=`` (each at most ``poll`` seconds) until it
        answers ``ended``, or ``timeout`` seconds in all passed (None: as long as it takes);
        answers the last answer."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if deadline is None else min(poll, deadline - time.monotonic())
            left = max(left, 0.001)
            answer = self._get(path, query={"timeout": _seconds(left)}, timeout=left + self.timeout)
            if answer.get("ended") or (deadline is not None and time.monotonic() >= deadline):
                return answer

    def wait(self, run_id, timeout=None, poll=_POLL):
        """Waits until the run ended: repeats the long poll ``GET /runs/{id}/wait`` (each at most
        ``poll`` seconds) until it answers ``ended``, or ``timeout`` seconds in all passed
        (None: as long as it takes). Answers the last answer (``{"id", "state", "ended",
        "error"}``); check ``ended`` when you gave a timeout."""
        return self._long_poll("/runs/%s/wait" % _q(run_id), timeout, poll)

    def result(self, run_id):
        """A run's result (``toolq result --json``)."""
        return self._get("/runs/%s/result" % _q(run_id))

    def log(self, run_id, offset=None, length=None):
        """A run's log as text: all of it, or ``length`` bytes from byte ``offset``."""
        _, raw = self._raw(
            "GET", "/runs/%s/log" % _q(run_id), query={"offset": offset, "length": length}
        )
        return raw.decode("utf-8", "replace")

    def cancel(self, run_id):
        """Cancels a run (``toolq cancel --json``)."""
        return self._post("/runs/%s/cancel" % _q(run_id))

    def retry(self, run_id):
        """Re-queues a failed or cancelled run (``toolq retry --json``)."""
        return self._post("/runs/%s/retry" % _q(run_id))

    def approve(self, run_id, note=None):
        """Approves a run awaiting approval (``toolq approve --json``)."""
        return self._post("/runs/%s/approve" % _q(run_id), _fields(note=note))

    def deny(self, run_id, reason=None):
        """Denies a run awaiting approval (``toolq deny --json``)."""
        return self._post("/runs/%s/deny" % _q(run_id), _fields(reason=reason))

    def signal(self, run_id, name, payload=None):
        """Sends the event ``name`` with ``payload`` to a run (``toolq signal --json``); a run
        waiting for it resumes, one sent earlier is kept for its wait."""
        return self._post("/runs/%s/signal" % _q(run_id), _fields(name=name, payload=payload))

    # ---- batches ---------------------------------------------------------------------

    def create_batch(self, runs, session=None, title=None, on_complete=None):
        """Creates a batch of ``runs`` (RunSpec dicts; ``ref``/``after`` link them) in one
        transaction (``POST /batches``). ``on_complete`` is ``{"tool", "args"}`` (or a
        ``(tool, args)`` pair): a run enqueued once every run is final. Answers
        ``{"batch_id", "enqueued", "ids", "runs"}``."""
        if isinstance(on_complete, (tuple, list)):
            tool, args = on_complete
            on_complete = {"tool": tool, "args": args if args is not None else {}}
        body = _fields(session=session, title=title, on_complete=on_complete)
        body["runs"] = list(runs)
        return self._post("/batches", body)

    def batches(self, session=None, state=None, limit=None, before=None):
        """Batches, newest first (``toolq batch list --json``)."""
        return self._get(
            "/batches", {"session": session, "state": state, "limit": limit, "before": before}
        )

    def batch(self, batch_id):
        """One batch (``toolq batch show --json``)."""
        return self._get("/batches/%s" % _q(batch_id))

    def wait_batch(self, batch_id, timeout=None, poll=_POLL):
        """Waits until every run of the batch is final, repeating the long poll (as
        :meth:`wait`). Answers ``toolq batch wait --json``'s shape; check ``ended``."""
        return self._long_poll("/batches/%s/wait" % _q(batch_id), timeout, poll)

    def cancel_batch(self, batch_id, dry_run=False):
        """Cancels every unfinished run of the batch (``toolq batch cancel --json``)."""
        return self._post("/batches/%s/cancel" % _q(batch_id), _fields(dry_run=dry_run or None))

    def retry_batch(self, batch_id, dry_run=False):
        """Re-queues every failed or cancelled run of the batch (``toolq batch retry --json``)."""
        return self._post("/batches/%s/retry" % _q(batch_id), _fields(dry_run=dry_run or None))

    # ---- schedules -------------------------------------------------------------------

    def add_schedule(self, tool, args=None, **fields):
        """Adds a schedule (``POST /schedules``): ``cron=`` (with ``tz=``) or ``at=``, and
        ``toolq schedule add``'s other flags by name (``session``, ``title``, ``missed``,
        ``overlap``, ``catchup_window``, ``priority``, ``max_attempts``, ``timeout``,
        ``no_signal``, ``delivery``). Answers the schedule."""
        return self._post("/schedules", _spec(tool, args, fields))

    def schedules(self, session=None):
        """Schedules, newest first (``toolq schedule list --json``)."""
        return self._get("/schedules", {"session": session})

    def schedule(self, schedule_id):
        """A schedule with its next fires and recent occurrences (``schedule show --json``)."""
        return self._get("/schedules/%s" % _q(schedule_id))

    def enable_schedule(self, schedule_id):
        """Enables a disabled or cancelled schedule from now on."""
        return self._post("/schedules/%s/enable" % _q(schedule_id))

    def disable_schedule(self, schedule_id):
        """Disables a schedule (not marked cancelled)."""
        return self._post("/schedules/%s/disable" % _q(schedule_id))

    def cancel_schedule(self, schedule_id):
        """Cancels a schedule: no more ticks fire."""
        return self._post("/schedules/%s/cancel" % _q(schedule_id))

    # ---- the inbox -------------------------------------------------------------------

    def inbox(self, session, unread=None, limit=None, before=None, after=None):
        """A page of a session's inbox: ``{"messages", "next_before", "next_after"}``, the
        messages newest first as ``toolq inbox --json`` prints them (``before``: older ones,
        ``after``: the ones right after that id). Listing marks nothing."""
        return self._get(
            "/sessions/%s/inbox" % _q(session),
            {"unread": unread, "limit": limit, "before": before, "after": after},
        )

    def ack(self, session, ids=None, through=None):
        """Acknowledges messages of a session: those in ``ids``, and/or every one with an id
        up to ``through``. Answers ``{"acknowledged": n}``."""
        body = _fields(through=through)
        body["ids"] = [int(i) for i in (ids or [])]
        return self._post("/sessions/%s/inbox/ack" % _q(session), body)

    def stream_inbox(self, session, last_event_id=None, read_timeout=90.0, retry=1.0):
        """Iterates a session's messages as they commit (``GET /sessions/{id}/inbox/stream``,
        Server-Sent Events), each message dict once. After a dropped connection it reconnects
        with ``Last-Event-ID``, so nothing is lost or repeated; ``last_event_id`` starts after
        that message id (None: the server's default start). It never ends by itself: break out
        of the loop, or call ``close()``. ``read_timeout`` (seconds) bounds the silence before
        reconnecting (the server sends keep-alives more often); ``retry`` is the first pause
        before a reconnect (doubling to 30 s while the server is unreachable)."""
        return InboxStream(self, session, last_event_id, read_timeout, retry)


def _fields(**kv):
    """The given keyword arguments that are not None, as a JSON body."""
    return {k: v for k, v in kv.items() if v is not None}


class InboxStream:
    """An iterator over a session's inbox stream (see :meth:`Client.stream_inbox`).

    ``last_event_id`` is the id of the last message yielded (what a reconnect resumes after);
    ``reconnects`` counts the reconnects so far. ``drop()`` closes the current connection as a
    network failure would (the next message comes over a new one); ``close()`` ends the
    iteration."""

    def __init__(self, client, session, last_event_id, read_timeout, retry):
        self.client = client
        self.session = session
        self.last_event_id = None if last_event_id is None else str(last_event_id)
        self.read_timeout = read_timeout
        self.retry = retry
        self.reconnects = 0
        self._conn = None
        self._resp = None
        self._closed = False
        self._connected_once = False

    def __iter__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends the stream: closes the connection; the iteration stops."""
        self._closed = True
        self.drop()

    def drop(self):
        """Closes the current connection (the next iteration reconnects with Last-Event-ID)."""
        conn, self._conn, self._resp = self._conn, None, None
        if conn is not None:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _connect(self):
        c = self.client
        u = urllib.parse.urlsplit(c.base_url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname, u.port, timeout=self.read_timeout)
        path = (u.path or "") + "/api/v1/sessions/%s/inbox/stream" % _q(self.session)
        headers = c._headers({"Accept": "text/event-stream", "Cache-Control": "no-cache"})
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raw = resp.read()
            conn.close()
            raise ToolqError(resp.status, _problem(resp.status, raw))
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True
        self._conn, self._resp = conn, resp

    def _event(self):
        """The next event's (id, data) from the open connection; raises on a dropped one."""
        event_id, data, kind = None, [], "message"
        while True:
            resp = self._resp
            if resp is None:
                raise ConnectionError("the stream was dropped")
            line = resp.readline()
            if not line:
                raise ConnectionError("the server closed the stream")
            line = line.decode("utf-8").rstrip("\r\n")
            if not line:
                if data:
                    return event_id, kind, "\n".join(data)
                event_id, data, kind = None, [], "message"
                continue
            if line.startswith(":"):
                # A keep-alive, or the opening comment naming where the stream starts: kept
                # as the place to resume from until a message comes.
                m = _STARTS_AFTER.search(line)
                if m and self.last_event_id is None:
                    self.last_event_id = m.group(1)
                continue
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "id":
                event_id = value
            elif name == "data":
                data.append(value)
            elif name == "event":
                kind = value
            elif name == "retry" and value.isdigit():
                self.retry = int(value) / 1000.0

    def __next__(self):
        failures = 0
        while not self._closed:
            try:
                if self._resp is None:
                    self._connect()
                event_id, kind, data = self._event()
            except ToolqError as e:
                if e.status not in (502, 503, 504):
                    raise
                failed = True
            except (OSError, http.client.HTTPException, ValueError):
                failed = True
            else:
                failed = False
            if failed:
                self.drop()
                if self._closed:
                    break
                # The first reconnect is at once; then the pause doubles up to 30 s.
                if failures:
                    time.sleep(min(self.retry * 2 ** (failures - 1), 30.0))
                failures += 1
                continue
            failures = 0
            if kind != "message":
                continue
            if event_id is not None and _seen(event_id, self.last_event_id):
                continue
            msg = json.loads(data)
            if event_id is not None:
                self.last_event_id = event_id
            return msg
        raise StopIteration


def _seen(event_id, last):
    """Whether ``event_id`` is at or before ``last`` (message ids increase)."""
    if last is None:
        return False
    try:
        return int(event_id) <= int(last)
    except ValueError:
        return event_id == last
