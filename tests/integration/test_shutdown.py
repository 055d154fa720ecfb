"""Graceful shutdown: SIGTERM under load answers every request that was
accepted, turns /readyz to 503, closes the listeners, keeps every
acknowledged registration, and exits 0; a request in flight finishes; a
second signal ends the process at once; SIGINT behaves like SIGTERM."""

import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, Runner, Server, check, edit, fsync_shim_env,  # noqa: E402
                     load_texts)

T = Runner("test_shutdown")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]


def stopped_cleanly(srv):
    recs = srv.log_records()
    msgs = [r.get("msg", "") for r in recs]
    check(any(m.startswith("draining") for m in msgs), "no draining line")
    check(msgs and msgs[-1] == "stopped (exit 0)", "last line %r" % msgs[-1:])


@T.test
def sigterm_under_load(srv):
    acked = []           # ids acknowledged as registered
    served = [0]
    problems = []
    stop_at = [None]
    lock = threading.Lock()

    def client(i):
        conn = srv.connect(timeout=20)
        n = 0
        while True:
            if stop_at[0] and time.monotonic() > stop_at[0]:
                break
            doc = "load-%d-%d" % (i, n)
            text = edit(BASES[(i + n) % len(BASES)], 3, n) + "\n#%d-%d" % (i, n)
            req = {"id": doc, "text": text, "register": True, "k": 0}
            try:
                conn.request("POST", "/check-original", body=json.dumps(req),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                # Not served: the listener is closed or the connection was
                # closed while idle. Only a truncated answer is a failure.
                if isinstance(e, http.client.IncompleteRead):
                    with lock:
                        problems.append(("truncated", doc))
                if stop_at[0] is None:
                    with lock:
                        problems.append(("error before SIGTERM", repr(e)))
                conn.close()
                if stop_at[0]:
                    break
                conn = srv.connect(timeout=20)
                n += 1
                continue
            body = json.loads(data)
            with lock:
                served[0] += 1
                if resp.status == 200 and body["registered"]:
                    acked.append(doc)
                elif (resp.status == 503 and stop_at[0] and
                      body["error"]["code"] == "shutting_down"):
                    pass  # sent on keep-alive as the drain ended: refused, not lost
                elif resp.status != 200:
                    problems.append((resp.status, body))
            if resp.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = srv.connect(timeout=20)
            n += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    before = served[0]
    t0 = time.monotonic()
    srv.signal(signal.SIGTERM)
    stop_at[0] = time.monotonic() + 3
    code = srv.wait(timeout=20)
    elapsed = time.monotonic() - t0
    for t in threads:
        t.join(30)
    check(code == 0, "exit code %s" % code)
    check(elapsed < 5, "shutdown took %.1fs" % elapsed)
    check(before > 20, "too little load: %d" % before)
    check(not problems, "problems: %r" % problems[:5])
    stopped_cleanly(srv)
    # Every acknowledged registration survived.
    srv.restart()
    for doc in acked:
        status, body = srv.json("GET", "/documents/" + doc)
        check(status == 200, "acknowledged %s lost: %s %r" % (doc, status, body))
    ready = [r for r in srv.log_records() if r.get("msg") == "ready"]
    check(ready[-1]["documents"] >= len(acked), ready[-1])


class SlowReader:
    """A client whose request is answered with a large body it does not read
    (tiny receive buffer): the answer stays in flight, without using CPU,
    until read() is called. Keeps a drain going as long as a test needs."""

    N = 40000

    def __init__(self, srv):
        body = json.dumps({"texts": ["a"] * self.N}).encode()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((HOST, srv.port))
        self.sock.sendall(b"POST /fingerprint HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body)

    def read(self, timeout=30):
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        data = b""
        while True:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"Content-Length: (\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    break
        self.sock.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(rest)


def wait_inflight(srv, n, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.metrics().get("neardup_inflight_requests", 0) >= n:
            return
        time.sleep(0.01)
    raise AssertionError("the slow request never got in flight")


@T.test
def inflight_request_finishes_and_readyz_503(srv):
    with Server(["--max-batch", "100000", "--drain-timeout", "30"], in_memory=True) as s2:
        probes = [s2.connect(timeout=30) for _ in range(4)]
        for p in probes:
            p.request("GET", "/healthz")
            p.getresponse().read()
        slow = SlowReader(s2)
        wait_inflight(s2, 2)  # the slow answer + this scrape
        s2.signal(signal.SIGTERM)
        time.sleep(0.3)
        check(s2.proc.poll() is None, "exited with an answer in flight")
        seen = []
        for p in probes:
            try:
                p.request("GET", "/readyz")
                r = p.getresponse()
                seen.append((r.status, json.loads(r.read()), r.getheader("Connection")))
            except (OSError, http.client.HTTPException) as e:
                seen.append(("error", repr(e), None))
        check(len(seen) == 4, seen)
        for st, b, conn_hdr in seen:
            check(st == 503 and b["error"]["code"] == "draining", (st, b))
            check(conn_hdr == "close", conn_hdr)
        # Listener closed: new connections are refused.
        try:
            socket.create_connection((HOST, s2.port), timeout=2).close()
            refused = False
        except OSError:
            refused = True
        check(refused, "still accepting while draining")
        status, body = slow.read()
        check(status == 200 and len(body["results"]) == SlowReader.N, status)
        check(s2.wait(timeout=30) == 0)
        stopped_cleanly(s2)


@T.test
def drain_deadline(srv):
    with Server(["--max-batch", "100000", "--drain-timeout", "1"], in_memory=True) as s2:
        slow = SlowReader(s2)
        wait_inflight(s2, 2)
        t0 = time.monotonic()
        s2.signal(signal.SIGTERM)
        check(s2.wait(timeout=20) == 0)
        check(0.9 < time.monotonic() - t0 < 5, "deadline not kept: %.1fs" % (
            time.monotonic() - t0))
        check(any("deadline" in r.get("msg", "") for r in s2.log_records()), "no warning")
        slow.sock.close()


@T.test
def second_signal_exits_at_once(srv):
    with Server(["--max-batch", "100000", "--drain-timeout", "60"], in_memory=True) as s2:
        slow = SlowReader(s2)
        wait_inflight(s2, 2)
        s2.signal(signal.SIGTERM)
        time.sleep(0.3)
        check(s2.proc.poll() is None, "exited with an answer in flight")
        t0 = time.monotonic()
        s2.signal(signal.SIGINT)
        code = s2.wait(timeout=10)
        check(time.monotonic() - t0 < 1.0, "second signal was not immediate")
        check(code == -signal.SIGINT, "exit %s" % code)
        slow.sock.close()


@T.test
def sigint_like_sigterm(srv):
    with Server() as s2:
        s2.json("POST", "/check-original", {"text": BASES[0], "id": "x", "register": True})
        s2.signal(signal.SIGINT)
        check(s2.wait(timeout=20) == 0)
        stopped_cleanly(s2)
        s2.restart()
        status, _ = s2.json("GET", "/documents/x")
        check(status == 200)


@T.test
def idle_keepalive_does_not_delay(srv):
    with Server(["--drain-timeout", "20"], in_memory=True) as s2:
        conns = [s2.connect() for _ in range(5)]
        for c in conns:
            c.request("GET", "/healthz")
            c.getresponse().read()
        t0 = time.monotonic()
        s2.signal(signal.SIGTERM)
        check(s2.wait(timeout=20) == 0)
        check(time.monotonic() - t0 < 2, "idle connections delayed the exit")
        for c in conns:
            c.close()


def slow_fsync(srv_tmp):
    """An environment whose fsync sleeps while the returned file exists
    (set_delay() writes it)."""
    delay = os.path.join(srv_tmp, "fsync-delay")
    return fsync_shim_env(delay_file=delay), delay


def set_delay(path, ms):
    with open(path + ".tmp", "w") as f:
        f.write(str(ms))
    os.rename(path + ".tmp", path)


def answer_of(conn, method, path, body=None):
    """(status, parsed body) of one request, or ("error", repr) when the
    connection failed or closed without a whole answer."""
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=hdrs)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    except (OSError, http.client.HTTPException, ValueError) as e:
        return "error", repr(e)


@T.test
def waiting_request_at_the_drain_deadline(srv):
    """Fsync slowed to 2.5 s, --drain-timeout 1. X is
    being registered (its commit is slow), DELETE X waits behind it, then
    SIGTERM: the drain deadline passes with both in flight. The old
    teardown closed (freed) the store, then ran the queued tasks: X's
    completion woke the DELETE, which retried into the freed store (a
    heap use-after-free under ASan), and neither answer was ever written.
    Now X's client gets its result, the DELETE 503 shutting_down, and the
    process exits 0 with a clean sanitizer log."""
    env, delay = slow_fsync(srv.tmp)
    with Server(["--drain-timeout", "1"], sync=True, env=env) as s2:
        set_delay(delay, 2500)
        got = {}

        def register():
            got["put"] = answer_of(s2.connect(timeout=30), "POST", "/check-original",
                                   {"id": "X", "text": BASES[0], "register": True})

        def delete():
            got["delete"] = answer_of(s2.connect(timeout=30), "DELETE", "/documents/X")

        threads = [threading.Thread(target=register, daemon=True)]
        threads[0].start()
        time.sleep(0.5)  # X pending: its commit sleeps in fsync
        threads.append(threading.Thread(target=delete, daemon=True))
        threads[1].start()
        time.sleep(0.5)  # the DELETE waits behind X
        check(s2.proc.poll() is None, "exited early")
        s2.signal(signal.SIGTERM)
        code = s2.wait(timeout=30)
        for t in threads:
            t.join(30)
        check(code == 0, "exit code %s:\n%s", code, s2.log_tail())
        s2.check_sanitizers()
        print("     register: %r, delete: %r" % (got.get("put"), got.get("delete")))
        check(got.get("put", ("?",))[0] == 200 and got["put"][1]["registered"],
              "the registration got no result: %r", got.get("put"))
        st, body = got.get("delete", ("?", None))
        check(st == 200 or (st == 503 and body["error"]["code"] == "shutting_down"),
              "the waiting DELETE got %r", got.get("delete"))
        stopped_cleanly(s2)


@T.test
def keepalive_requests_around_the_drain_check(srv):
    """The race without the timeout: keep-alive clients
    keep registering and deleting the same few ids (so that requests wait
    behind each other) with a slow fsync while SIGTERM arrives; requests
    dispatched after the drain check found nothing in flight must not
    reach a closed store either. Every request gets a whole answer (its
    result, or 503 shutting_down) or a clean close; exit 0, no sanitizer
    report. Three rounds."""
    env, delay = slow_fsync(srv.tmp)
    set_delay(delay, 30)
    for round_ in range(3):
        with Server(["--drain-timeout", "1"], sync=True, env=env) as s2:
            stop = threading.Event()
            bad = []
            counts = {}
            lock = threading.Lock()

            def client(i):
                conn = s2.connect(timeout=30)
                n = 0
                while not stop.is_set():
                    doc = "ka-%d" % ((i + n) % 3)
                    if n % 2 == 0:
                        st, body = answer_of(conn, "POST", "/check-original",
                                             {"id": doc, "text": BASES[(i + n) % 3],
                                              "register": True, "k": 0})
                    else:
                        st, body = answer_of(conn, "DELETE", "/documents/" + doc)
                    with lock:
                        counts[st] = counts.get(st, 0) + 1
                    if st == "error":
                        if "IncompleteRead" in body:
                            bad.append(body)
                        break
                    if st == 503 and body["error"]["code"] not in ("shutting_down",
                                                                    "draining"):
                        bad.append((st, body))
                    elif st not in (200, 404, 409, 503):
                        bad.append((st, body))
                    n += 1
                conn.close()

            threads = [threading.Thread(target=client, args=(i,), daemon=True)
                       for i in range(6)]
            for t in threads:
                t.start()
            time.sleep(1.0 + 0.3 * round_)
            s2.signal(signal.SIGTERM)
            code = s2.wait(timeout=30)
            stop.set()
            for t in threads:
                t.join(30)
            check(code == 0, "exit code %s:\n%s", code, s2.log_tail())
            s2.check_sanitizers()
            print("     round %d: answers %r" % (round_, counts))
            check(not bad, "bad answers: %r", bad[:5])


def main():
    T.run(fresh=Server)


if __name__ == "__main__":
    main()
