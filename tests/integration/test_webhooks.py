"""Signed webhooks end to end: a real neardupd with --webhooks and a real
receiver on loopback (Python's http.server in a process of its own, which
verifies every Neardup-Signature as the README tells a receiver to):
every event type arrives signed and in order; a wrong secret fails the
receiver's verification; the receiver down for 30 s, then up: everything
arrives, nothing twice under a new id; a slow receiver (5 s per answer)
does not slow /check-original; kill -9 while delivering: after the
restart nothing is lost and a duplicate carries its event's id; 10,000
events in a burst are delivered with the lag metric seen above 0, then 0;
a receiver answering 200 with an endless body is read only up to a few
KiB and its event counts as delivered once (audit G07)."""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Runner, Server, check, free_port, load_texts  # noqa: E402

T = Runner("test_webhooks")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-webhooks-")
TOKENS = {"op": "operator-token-0123456789abcdef", "cms": "client-token-0123456789abcdef"}
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    f.write("op %s operator\ncms %s\n" % (TOKENS["op"], TOKENS["cms"]))
os.chmod(TOKEN_FILE, 0o600)
SECRET = "whsec-test-0123456789abcdef"
OTHER_SECRET = "whsec-not-the-receivers-secret"

# The receiver: verifies the signature with the secret it knows (the
# README's example), appends one JSON line per request to its log, answers
# 200 for a good signature and 401 for a bad one, after --delay seconds.
RECEIVER = r'''
import hashlib, hmac, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, secret, delay, log_path = int(sys.argv[1]), sys.argv[2].encode(), float(sys.argv[3]), sys.argv[4]
lock = threading.Lock()
log = open(log_path, "a", buffering=1)

def verify(secret, header, body, tolerance=300):
    try:
        parts = dict(p.split("=", 1) for p in header.split(","))
        t = int(parts["t"])
    except (ValueError, KeyError):
        return False
    mac = hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, parts.get("v1", "")) and abs(time.time() - t) <= tolerance

class Hook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        ok = verify(secret, self.headers.get("Neardup-Signature", ""), body)
        ev = json.loads(body) if ok else {}
        if delay:
            time.sleep(delay)
        rec = {"path": self.path, "ok": ok, "header_id": self.headers.get("Neardup-Event-Id"),
               "type_header": self.headers.get("Content-Type"), "id": ev.get("id"),
               "seq": ev.get("seq"), "type": ev.get("type"), "account": ev.get("account"),
               "at": time.time()}
        with lock:
            log.write(json.dumps(rec) + "\n")
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

srv = ThreadingHTTPServer(("127.0.0.1", port), Hook)
srv.daemon_threads = True
if len(sys.argv) > 6:  # https: certificate and key
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[5], sys.argv[6])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
'''


class Receiver:
    """The receiver process on a fixed port; stop() kills it (its
    connections die with it), start() brings it back on the same port."""

    def __init__(self, delay=0.0, port=None, tls=None):
        self.port = port or free_port()
        self.delay = delay
        self.tls = list(tls or [])  # [certificate, key]: https
        self.log = tempfile.mktemp(prefix="receiver-", suffix=".jsonl", dir=TMP)
        self.proc = None

    def start(self):
        for _ in range(100):  # the port may linger a moment after a kill
            self.proc = subprocess.Popen(
                [sys.executable, "-c", RECEIVER, str(self.port), SECRET, str(self.delay),
                 self.log] + self.tls, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            line = self.proc.stdout.readline()
            if line.startswith(b"ready"):
                return self
            self.proc.wait(timeout=5)
            time.sleep(0.1)
        raise RuntimeError("the receiver did not start on port %d" % self.port)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def url(self, path="/hook"):
        return "%s://%s:%d%s" % ("https" if self.tls else "http", HOST, self.port, path)

    def records(self, path="/hook", strict=True):
        """The records logged for path. strict=False, for polling while the
        receiver still writes: a line read torn is left out (CI saw one
        under ASan load); the final, strict read must parse every line."""
        if not os.path.exists(self.log):
            return []
        recs = []
        with open(self.log) as f:
            for line in f:
                if not line.endswith("\n"):
                    continue
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    if strict:
                        raise
        return [r for r in recs if r["path"] == path]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def hooks_file(subs):
    path = tempfile.mktemp(prefix="hooks-", suffix=".json", dir=TMP)
    with open(path, "w") as f:
        json.dump({"subscriptions": subs}, f)
    return path


def sub(name, url, **kw):
    d = {"name": name, "url": url, "secret": SECRET, "backoff_base_ms": 50,
         "backoff_cap_ms": 1000}
    d.update(kw)
    return d


def auth(who="op"):
    return {"Authorization": "Bearer " + TOKENS[who]}


def doc_path(doc, suffix=""):
    return "/documents/" + quote(doc, safe="") + suffix


def webhooks(srv):
    status, body = srv.json("GET", "/webhooks", headers=auth())
    check(status == 200, "GET /webhooks: %s %r", status, body)
    return {s["name"]: s for s in body["subscriptions"]}


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("not within %.0f s: %s" % (timeout, what))


def register(srv, doc, text, account="alice"):
    status, body = srv.json("POST", "/check-original",
                            {"id": doc, "text": text, "account": account, "register": True},
                            headers=auth("cms"))
    check(status == 200 and body["registered"], "%s: %s %r", doc, status, body)


def copy_check(srv, copy_id, text, conn=None):
    status, body = srv.json("POST", "/check-original",
                            {"id": copy_id, "text": text, "account": "bob"},
                            headers=auth(), conn=conn)
    check(status == 200 and not body["original"], "%s: %s %r", copy_id, status, body)


def one_of_each(srv, n):
    """Writes one event of every type about document "orig-<n>"; returns the types in order."""
    doc = "orig-%d" % n
    register(srv, doc, TEXTS["en%d" % (1 + n % 5)])
    copy_check(srv, "copy-%d" % n, TEXTS["en%d" % (1 + n % 5)])
    for method, suffix, body in (("POST", "/revoke", {"reason": "test"}), ("POST", "/restore", None),
                                 ("PUT", "/policy", {"reprint": "forbid"})):
        status, got = srv.json(method, doc_path(doc, suffix), body, headers=auth())
        check(status == 200, "%s %s: %s %r", method, suffix, status, got)
    status, got = srv.json("DELETE", doc_path(doc), headers=auth())
    check(status == 200, "DELETE: %s %r", status, got)
    line = json.dumps({"id": "imp-%d" % n, "account": "carol", "text": TEXTS["zh1"]}) + "\n"
    status, got = srv.json("POST", "/import", raw=line.encode(),
                           headers=dict(auth(), **{"Content-Type": "application/x-ndjson"}))
    check(status == 200, "import: %s %r", status, got)
    return ["copy.detected", "claim.revoked", "claim.restored", "policy.changed",
            "document.deleted", "import.finished"]


def check_in_order(recs, what):
    """Good signatures only, ids matching their header, seqs strictly increasing."""
    check(all(r["ok"] for r in recs), "%s: a bad signature: %r", what, recs)
    check(all(r["header_id"] == r["id"] and r["type_header"] == "application/json"
              for r in recs), "%s: headers: %r", what, recs)
    seqs = [r["seq"] for r in recs]
    check(seqs == sorted(set(seqs)), "%s: out of order or twice: %r", what, seqs)


@T.test
def every_type_arrives_signed_in_order():
    with Receiver() as rcv:
        path = hooks_file([sub("all", rcv.url()),
                           sub("revokes", rcv.url("/revokes"), types=["claim.revoked"]),
                           sub("wrong", rcv.url("/wrong"), secret=OTHER_SECRET)])
        with Server(["--token-file", TOKEN_FILE, "--webhooks", path]) as srv:
            want = one_of_each(srv, 1)
            recs = wait_for(lambda: (lambda r: r if len(r) >= 6 else None)(
                rcv.records(strict=False)), 15, "six events at /hook")
            check_in_order(recs, "all")
            check([r["type"] for r in recs] == want, "types: %r", [r["type"] for r in recs])
            check(recs[0]["account"] == "alice", "copy.detected names the original's account")
            check(len({r["id"] for r in recs}) == 6, "ids: %r", recs)
            revokes = wait_for(lambda: rcv.records("/revokes", strict=False), 10,
                               "the filtered subscription")
            check([r["type"] for r in revokes] == ["claim.revoked"], "filter: %r", revokes)
            # A wrong secret fails the receiver's verification (it answers 401: retried).
            bad = wait_for(lambda: rcv.records("/wrong", strict=False), 10,
                           "the wrong secret's attempts")
            check(bad and not any(r["ok"] for r in bad), "a wrong secret verified: %r", bad)
            state = webhooks(srv)
            check(state["all"]["lag"] == 0 and state["all"]["delivered"] == 6, state["all"])
            check(state["wrong"]["delivered"] == 0 and state["wrong"]["last_status"] == 401
                  and state["wrong"]["state"] in ("retrying", "delivering"), state["wrong"])
            check(state["wrong"]["next_attempt_at"] is not None or
                  state["wrong"]["state"] == "delivering", state["wrong"])
            m = srv.metrics()
            check(m['neardup_webhook_delivered_total{subscription="all"}'] == 6, "metrics")
            check(m['neardup_webhook_failed_total{subscription="wrong"}'] >= 1, "metrics")
            check(m['neardup_webhook_lag_events{subscription="all"}'] == 0, "metrics")
            check('neardup_webhook_paused{subscription="wrong"}' in m, "metrics")
            # The operator's endpoints.
            status, body = srv.json("GET", "/webhooks", headers=auth("cms"))
            check(status == 403, "a client reads /webhooks: %s", status)
            status, body = srv.json("GET", "/webhooks")
            check(status == 401, "no token: %s", status)
            status, body = srv.json("POST", "/webhooks/nope/resume", headers=auth())
            check(status == 404 and body["error"]["code"] == "subscription_not_found", body)
            status, body = srv.json("POST", "/webhooks/wrong/resume", headers=auth())
            check(status == 202 and body["subscription"]["name"] == "wrong", body)
            status, body = srv.json("GET", "/webhooks/wrong/resume", headers=auth())
            check(status == 405, "GET resume: %s", status)


@T.test
def https_verified_with_ca_file():
    """An https receiver with a self-signed certificate: delivered when the
    subscription names it as ca_file, refused (certificate unverified) when not."""
    cert, key = os.path.join(TMP, "cert.pem"), os.path.join(TMP, "key.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                        "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True, timeout=60)
    check(p.returncode == 0, "openssl: %s", p.stderr)
    with Receiver(tls=[cert, key]) as rcv:
        path = hooks_file([sub("tls", rcv.url(), ca_file=cert),
                           sub("untrusted", rcv.url("/untrusted"))])
        with Server(["--token-file", TOKEN_FILE, "--webhooks", path]) as srv:
            register(srv, "tls-orig", TEXTS["en1"])
            copy_check(srv, "tls-copy", TEXTS["en1"])
            recs = wait_for(lambda: rcv.records(strict=False), 15, "an event over https")
            check_in_order(recs, "https")
            check([r["type"] for r in recs] == ["copy.detected"], recs)
            state = wait_for(lambda: (lambda s: s if s["failed"] else None)(
                webhooks(srv)["untrusted"]), 10, "the untrusted certificate refused")
            check(state["delivered"] == 0 and "certificate" in state["last_error"].lower(), state)
            check(rcv.records("/untrusted") == [], "sent to an unverified receiver")
            print("  untrusted: %s" % state["last_error"])


@T.test
def bad_file_exits_2():
    for text, needle in (("{", "webhooks file"),
                         ('{"subscriptions":[{"name":"a","url":"ftp://x/","secret":"%s"}]}'
                          % SECRET, "http or https"),
                         ('{"subscriptions":[{"name":"a","url":"http://x/","secret":"short"}]}',
                          "secret must be")):
        path = tempfile.mktemp(dir=TMP)
        with open(path, "w") as f:
            f.write(text)
        srv = Server(["--webhooks", path], in_memory=True)
        try:
            srv.start()
            raise AssertionError("started with %s" % text)
        except RuntimeError:
            pass
        check(srv.proc.wait(timeout=10) == 2, "exit %s", srv.proc.returncode)
        check(needle in srv.log_text(), "%s: %s", needle, srv.log_text())
        srv.cleanup()


@T.test
def receiver_down_30s_then_everything_once():
    """The receiver down for 30 s with a feed that keeps events 1 s
    (--events-max-age 1): the subscription's position holds them, so all
    arrive, once, when it is back."""
    rcv = Receiver()
    rcv.start()
    path = hooks_file([sub("down", rcv.url(), backoff_cap_ms=2000)])
    try:
        with Server(["--token-file", TOKEN_FILE, "--webhooks", path,
                     "--events-max-age", "1"]) as srv:
            register(srv, "down-orig", TEXTS["en2"])
            copy_check(srv, "down-copy-0", TEXTS["en2"])
            wait_for(lambda: rcv.records(strict=False), 10, "the first event")
            rcv.stop()
            t_down = time.monotonic()
            for i in range(1, 31):
                copy_check(srv, "down-copy-%d" % i, TEXTS["en2"])
            time.sleep(2)  # older than --events-max-age; a commit now trims what is not held
            copy_check(srv, "down-copy-31", TEXTS["en2"])
            state = wait_for(lambda: (lambda s: s if s["attempts"] >= 3 and s["lag"] >= 31
                                      else None)(webhooks(srv)["down"]), 15,
                             "failed attempts and the lag seen while down")
            check(state["state"] in ("retrying", "delivering") and state["last_error"], state)
            time.sleep(max(0.0, 30 - (time.monotonic() - t_down)))
            state = webhooks(srv)["down"]
            print("  down 30 s: %d attempts failed, lag %d, last error: %s"
                  % (state["failed"], state["lag"], state["last_error"]))
            check(state["state"] != "paused", state)
            rcv.start()
            t_up = time.monotonic()
            wait_for(lambda: len(rcv.records(strict=False)) >= 32, 15,
                     "32 events after the receiver is up")
            print("  all 32 delivered %.1f s after the receiver came back"
                  % (time.monotonic() - t_up))
            time.sleep(0.5)
            recs = rcv.records()
            check_in_order(recs, "down")
            check(len(recs) == 32, "32 events, %d deliveries" % len(recs))
            check(webhooks(srv)["down"]["lag"] == 0, "lag")
            # Delivered everywhere now: the next commit trims them from the feed.
            time.sleep(1.2)
            copy_check(srv, "down-copy-32", TEXTS["en2"])
            status, body = srv.json("GET", "/events?after=0&limit=100", headers=auth())
            check(status == 410 or (status == 200 and len(body["events"]) < 33),
                  "nothing trimmed once delivered: %s %r" % (status, body))
    finally:
        rcv.stop()


def p99_checks(servers, n=200):
    """n register-off checks on each server, interleaved (a neighbour's noise
    falls on both alike); returns [(p99, median)] per server, seconds."""
    conns = [srv.connect() for srv in servers]
    lat = [[] for _ in servers]
    for i in range(n):
        text = TEXTS["en%d" % (1 + i % 5)] + " variant %d" % i
        for k, srv in enumerate(servers):
            t0 = time.perf_counter()
            status, body = srv.json("POST", "/check-original", {"text": text, "register": False},
                                    conn=conns[k])
            lat[k].append(time.perf_counter() - t0)
            check(status == 200, "%s %r", status, body)
    for c in conns:
        c.close()
    out = []
    for xs in lat:
        xs.sort()
        out.append((xs[int(0.99 * (n - 1))], xs[n // 2]))
    return out


@T.test
def slow_receiver_does_not_slow_checks():
    with Receiver(delay=5.0) as rcv:
        path = hooks_file([sub("slow", rcv.url(), timeout_ms=20000)])
        with Server(["--token-file", TOKEN_FILE]) as plain, \
                Server(["--token-file", TOKEN_FILE, "--webhooks", path]) as srv:
            register(srv, "slow-orig", TEXTS["en3"])
            for i in range(5):
                copy_check(srv, "slow-copy-%d" % i, TEXTS["en3"])
            wait_for(lambda: webhooks(srv)["slow"]["in_flight"], 5, "an event in flight")
            p99_checks([plain, srv], 50)  # warm both
            # A check held by the receiver would take seconds, every time; a
            # neighbour's noise (tests run two at a time) only sometimes: up
            # to three rounds, the first within the bound passes.
            for attempt in range(3):
                t0 = time.monotonic()
                (without, med0), (with_slow, med1) = p99_checks([plain, srv])
                took = time.monotonic() - t0
                print("  /check-original p99 without a subscription %.2f ms (median %.2f), "
                      "with a 5 s receiver %.2f ms (median %.2f); 2 x 200 checks interleaved "
                      "in %.1f s" % (without * 1e3, med0 * 1e3, with_slow * 1e3, med1 * 1e3,
                                     took))
                if with_slow <= max(3 * without, without + 0.025):
                    break
            state = webhooks(srv)["slow"]
            check(state["lag"] > 0 and state["in_flight"], "still delivering: %r" % state)
    check(with_slow <= max(3 * without, without + 0.025),
          "p99 %.2f ms with a slow receiver, %.2f ms without" % (with_slow * 1e3, without * 1e3))


@T.test
def kill9_while_delivering_loses_nothing():
    with Receiver(delay=0.02) as rcv:
        path = hooks_file([sub("crash", rcv.url())])
        srv = Server(["--token-file", TOKEN_FILE, "--webhooks", path])
        try:
            srv.start()
            register(srv, "crash-orig", TEXTS["en4"])
            conn = srv.connect()
            for i in range(300):
                copy_check(srv, "crash-copy-%d" % i, TEXTS["en4"], conn=conn)
            conn.close()
            wait_for(lambda: len(rcv.records(strict=False)) >= 40, 20, "40 deliveries")
            srv.proc.kill()  # SIGKILL mid-delivery
            srv.proc.wait()
            before = len(rcv.records())
            check(before < 300, "all delivered before the kill: nothing tested")
            srv.restart()
            wait_for(lambda: len({r["seq"] for r in rcv.records(strict=False)}) >= 300, 60,
                     "300 distinct events after the restart")
            time.sleep(0.5)
            recs = rcv.records()
            check(all(r["ok"] for r in recs), "bad signature")
            by_seq = {}
            for r in recs:
                by_seq.setdefault(r["seq"], set()).add(r["id"])
            check(all(len(ids) == 1 for ids in by_seq.values()),
                  "an event sent again under another id")
            seqs = sorted(by_seq)
            check(seqs == list(range(seqs[0], seqs[0] + 300)), "lost: %r" % seqs)
            print("  kill -9 after %d of 300 deliveries: %d deliveries in all, %d sent twice "
                  "(same id)" % (before, len(recs), len(recs) - 300))
            check(len(recs) - 300 <= 50, "too many sent twice: %d" % (len(recs) - 300))
        finally:
            srv.cleanup()


@T.test
def burst_of_10000_with_lag_reported():
    n = 10000
    with Receiver() as rcv:
        path = hooks_file([sub("burst", rcv.url())])
        with Server(["--token-file", TOKEN_FILE, "--webhooks", path], threads=2) as srv:
            register(srv, "burst-orig", TEXTS["en5"])
            lags = []
            stop = threading.Event()

            def watch():
                while not stop.is_set():
                    m = srv.metrics()
                    lags.append(m.get('neardup_webhook_lag_events{subscription="burst"}', -1))
                    stop.wait(0.1)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            t0 = time.monotonic()
            errors = []

            def writer(k):
                try:
                    conn = srv.connect()
                    for i in range(k, n, 4):
                        copy_check(srv, "burst-%d" % i, TEXTS["en5"], conn=conn)
                    conn.close()
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            check(not errors, "checks: %r", errors[:3])
            t_written = time.monotonic() - t0
            wait_for(lambda: len(rcv.records(strict=False)) >= n, 120, "10,000 deliveries")
            t_all = time.monotonic() - t0
            wait_for(lambda: srv.metrics().get(
                'neardup_webhook_lag_events{subscription="burst"}') == 0, 5, "lag 0")
            stop.set()
            watcher.join(timeout=5)
            recs = rcv.records()
            check_in_order(recs, "burst")
            first, last = recs[0]["at"], recs[-1]["at"]
            print("  10,000 events written in %.1f s, all delivered after %.1f s; delivery "
                  "%.0f events/s; lag seen up to %d" % (t_written, t_all,
                                                        (n - 1) / max(last - first, 1e-6),
                                                        max(lags)))
            check(max(lags) > 0, "the lag was never seen above 0: %r" % lags[:20])


# A hostile receiver (audit G07): reads the request, answers 200 with a body
# that never ends (no Content-Length, 64 KiB writes until the peer closes or
# 60 s), and logs each connection when it ends: its event id and the bytes
# it managed to send.
ENDLESS = r'''
import json, re, socket, sys, threading, time
port, log_path = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
chunk = b"x" * 65536

def serve(c):
    t0, sent, head = time.monotonic(), 0, b""
    try:
        while b"\r\n\r\n" not in head:
            d = c.recv(65536)
            if not d:
                return
            head += d
        m = re.search(rb"(?i)neardup-event-id: *(\S+)", head)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        while time.monotonic() - t0 < 60:
            sent += c.send(chunk)
    except OSError:
        pass
    finally:
        c.close()
        rec = {"id": m.group(1).decode() if m else None, "sent": sent,
               "secs": time.monotonic() - t0}
        with lock:
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def cpu_seconds(pid):
    """user + system CPU of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@T.test
def endless_2xx_body_is_cut_and_delivers_once():
    """G07: the answer's body is read up to a few KiB, the transfer ended
    there, and the 2xx status delivers the event once (no retry)."""
    port = free_port()
    log = tempfile.mktemp(prefix="endless-", suffix=".jsonl", dir=TMP)
    rx = subprocess.Popen([sys.executable, "-c", ENDLESS, str(port), log],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        check(rx.stdout.readline().startswith(b"ready"), "the endless receiver did not start")
        url = "http://%s:%d/hook" % (HOST, port)
        path = hooks_file([sub("endless", url, timeout_ms=5000, backoff_base_ms=200)])
        with Server(["--token-file", TOKEN_FILE, "--webhooks", path]) as srv:
            register(srv, "endless-orig", TEXTS["en2"])
            cpu0 = cpu_seconds(srv.proc.pid)
            t0 = time.monotonic()
            copy_check(srv, "endless-copy", TEXTS["en2"])

            def conns():
                if not os.path.exists(log):
                    return []
                with open(log) as f:
                    return [json.loads(line) for line in f if line.endswith("\n")]

            # Before the fix the connection lasted timeout_ms (5 s), reading
            # gigabytes; the fix ends it after the first buffer.
            first = wait_for(conns, 10, "the endless answer's connection ended")[0]
            # The receiver's writes land in the sockets' buffers (a few MB on
            # loopback) before neardupd reads its 4 KiB and closes.
            check(first["sent"] < 32e6 and first["secs"] < 3,
                  "one answer's body was read for %.1f s: %.0f MB sent by the receiver, "
                  "neardupd CPU %.2f s" % (first["secs"], first["sent"] / 1e6,
                                          cpu_seconds(srv.proc.pid) - cpu0))
            wait_for(lambda: webhooks(srv)["endless"]["delivered"] >= 1, 5,
                     "the event delivered: %r" % webhooks(srv)["endless"])
            time.sleep(1.5)  # a retry, if any, would connect meanwhile (backoff <= 200 ms)
            cpu = cpu_seconds(srv.proc.pid) - cpu0
            state = webhooks(srv)["endless"]
            got = conns()
            print("  endless 200 body: %.1f KB sent by the receiver in %.2f s before neardupd "
                  "closed; neardupd CPU %.2f s in %.1f s; state %s, delivered %d, %d connection(s)"
                  % (first["sent"] / 1e3, first["secs"], cpu, time.monotonic() - t0,
                     state["state"], state["delivered"], len(got)))
            check(cpu < 1.0, "neardupd used %.2f s of CPU for one event" % cpu)
            check(state["delivered"] == 1 and state["failed"] == 0 and state["state"] == "idle"
                  and state["lag"] == 0 and not state["last_error"],
                  "not delivered exactly once: %r" % state)
            check(len(got) == 1 and got[0]["id"], "connections: %r" % got)
            check(any("was cut after 4096 bytes" in r.get("msg", "") for r in srv.log_records()),
                  "the cut answer was not logged")
    finally:
        rx.kill()
        rx.wait(timeout=10)


if __name__ == "__main__":
    T.run()
