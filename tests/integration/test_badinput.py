"""Hostile input against a running neardupd: invalid and deeply nested JSON,
wrong types, invalid UTF-8, NUL bytes, empty and oversized bodies, chunked
bodies, wrong or missing Content-Type, huge and numerous headers, HTTP/1.0,
pipelining (and a pipeline flood that never reads), slowloris, 5,000 idle
connections, the connection limit, and clients that leave in the middle of
a body.

Each gets a clear JSON error or a bounded close. Meanwhile a prober keeps
asking /healthz and a small /fingerprint on fresh connections: none may
fail, and the 99th percentile must stay within the latency target (README,
"Limits"): 250 ms, three times that on a sanitizer build. The server's
resident memory must come back down afterwards (not on a sanitizer build,
whose allocator keeps freed memory in quarantine)."""

import http.client
import json
import os
import random
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, Runner, Server, check, expect_error, fsync_shim_env,  # noqa: E402
                     load_texts)

T = Runner("test_badinput")
TEXTS = load_texts()
LONG = TEXTS["en1"]
TIMEOUT_S = 2  # --request-timeout of the servers here
ARGS = ["--request-timeout", str(TIMEOUT_S), "--max-body", "1M", "--max-text", "100K"]
LATENCY_TARGET_S = 0.25


# ---- helpers ----

def rss_kb(srv):
    with open("/proc/%d/status" % srv.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(srv):
    with open("/proc/%d/maps" % srv.proc.pid) as f:
        maps = f.read()
    return "libasan" in maps or "libclang_rt.asan" in maps


def target(srv):
    return LATENCY_TARGET_S * (3 if sanitized(srv) else 1)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def raw(srv, data, timeout=5.0, read=True):
    """Sends data on a new connection; returns (everything read until the
    server closed, seconds until then). b"<timeout>" marks a server that did
    not close within timeout."""
    s = socket.create_connection((HOST, srv.port), timeout=timeout)
    t0 = time.monotonic()
    out = b""
    try:
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            pass  # answered and closed before all was sent: read the answer
        while read:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        out += b"<timeout>"
    except ConnectionResetError:
        out += b"<reset>"
    finally:
        s.close()
    return out, time.monotonic() - t0


def responses(data):
    """Splits a byte stream into [(status, headers, body)] (Content-Length
    framed, or up to the end)."""
    out = []
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", len(rest)))
        out.append((int(lines[0].split()[1]), hdrs, rest[:n]))
        data = rest[n:]
    return out


def json_error(resp, status, code):
    """resp (one response) is a JSON error with this status and code."""
    st, hdrs, body = resp
    check(hdrs.get("content-type") == "application/json", "not JSON: %r", hdrs)
    return expect_error(st, json.loads(body), status, code)


def post(srv, path, body, ctype="application/json", headers=None):
    hdrs = {"Content-Type": ctype} if ctype else {}
    hdrs.update(headers or {})
    status, rh, data = srv.request("POST", path, body, hdrs)
    try:
        parsed = json.loads(data)
    except ValueError:
        raise AssertionError("%s: body is not JSON: %r" % (path, data[:200]))
    if status >= 400:
        check(rh.get("content-type") == "application/json", "error not JSON: %r", rh)
    return status, parsed


class Prober:
    """Asks /healthz and a small /fingerprint, each on a new connection,
    every 20 ms until stopped; every answer must be a 200."""

    def __init__(self, srv, target_s=None):
        self.srv = srv
        self.target_s = target_s  # default: target(srv)
        self.lat = []
        self.errors = []
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        body = json.dumps({"text": "a short text to fingerprint"}).encode()
        while not self.stopping:
            for method, path, data in (("GET", "/healthz", None),
                                       ("POST", "/fingerprint", body)):
                t0 = time.monotonic()
                try:
                    status, _, _ = self.srv.request(
                        method, path, data, {"Content-Type": "application/json"}, timeout=10)
                    if status != 200:
                        self.errors.append(status)
                except (OSError, http.client.HTTPException) as e:
                    self.errors.append(repr(e))
                self.lat.append(time.monotonic() - t0)
            time.sleep(0.02)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping = True
        self.thread.join(15)
        if exc[0] is None:
            self.check()

    def check(self):
        check(not self.errors, "other clients failed meanwhile: %r", self.errors[:5])
        check(len(self.lat) >= 4, "too few probes: %d", len(self.lat))
        lat = sorted(self.lat)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        print("     probes: %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
            len(lat), lat[len(lat) // 2] * 1e3, p99 * 1e3, lat[-1] * 1e3))
        limit = self.target_s or target(self.srv)
        check(p99 <= limit, "p99 %.0f ms over the target of %.0f ms", p99 * 1e3, limit * 1e3)

    def p99(self):
        lat = sorted(self.lat)
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0


def still_serving(srv):
    status, _, _ = srv.request("GET", "/healthz", timeout=10)
    check(status == 200, "healthz %s", status)


# ---- bodies ----

@T.test
def invalid_json(srv):
    bodies = [b"{", b"}", b"[]", b"null", b"42", b"\"text\"", b"{\"text\"}", b"{\"text\":}",
              b"{\"text\": \"a\",}", b"{text: \"a\"}", b"{\"text\": 'a'}", b"\x00\x01\x02",
              b"\xef\xbb\xbf{\"text\": \"a\"}", b"{\"text\": \"a\"}\x00", b"{\"a\":1}{\"a\":2}",
              b"{\"text\": \"unterminated", b"{\"text\": \"a\" \"b\"}", os.urandom(512),
              b"{\"text\": \"\\uZZZZ\"}", b"{\"text\": \"a\"" + b" " * 5000]
    for path in ("/fingerprint", "/check-original"):
        for body in bodies:
            status, resp = post(srv, path, body)
            expect_error(status, resp, 400, "invalid_json")
            err = resp["error"]
            if "line" in err:
                check(err["line"] >= 1 and err["column"] >= 1, err)


@T.test
def deeply_nested_json(srv):
    for depth in (513, 10000, 400000):
        for opener, closer in ((b"[", b"]"), (b"{\"a\":", b"}")):
            body = b"{\"x\": " + opener * depth + closer * depth + b"}"
            if len(body) > (1 << 20):
                body = body[:(1 << 20)]
            t0 = time.monotonic()
            status, resp = post(srv, "/fingerprint", body)
            expect_error(status, resp, 400, "invalid_json")
            check(time.monotonic() - t0 < 2, "slow: %.1fs", time.monotonic() - t0)
    # Within the limit in "meta": read, then refused for its size or kept.
    meta = "[" * 500 + "]" * 500
    status, resp = post(srv, "/check-original",
                        ('{"text": %s, "meta": {"a": %s}}' % (json.dumps(LONG), meta)).encode())
    check(status == 200, resp)


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def meta_body(register, size, empty_objects=True):
    """A /check-original body of about size bytes, nearly all of it "meta":
    {"a": [{}, {}, ...]} (a node per 3 bytes), or one long string."""
    head = '{"text": %s, %s"meta": {"a": ' % (
        json.dumps(LONG), '"id": "amp-1", "register": true, ' if register else "")
    n = size - len(head) - 4
    inner = "[" + ("{}," * (n // 3))[:-1] + "]" if empty_objects else json.dumps("m" * n)
    return (head + inner + "}}").encode()


@T.test
def meta_amplification(srv):
    """A 4 MiB body of empty objects in "meta" cost 1.4 s
    of CPU and 310 MB of memory (a jansson node each) before it was refused
    as too large, for queries too and before the token was checked. Now a
    query ignores meta, a registration checks the token first and bounds
    meta's size before any tree is built: each costs about what a body of
    the same size with one long string in meta costs (measured here first),
    and the peak memory barely moves, while other clients are served."""
    token = "nd-badinput-7c1e5a90b2d34f68a1c9e07b5d2f3a64"
    path = os.path.join(srv.tmp, "token")
    with open(path, "w") as f:
        f.write(token)
    os.chmod(path, 0o600)
    size = (4 << 20) - 4096
    auth = {"Authorization": "Bearer " + token}
    with Server(["--token-file", path, "--request-timeout", "60"], in_memory=True) as s:
        pid = s.proc.pid
        slow = 3 if sanitized(s) else 1

        def timed(body, headers=None):
            c0 = cpu_s(pid)
            status, resp = post(s, "/check-original", body, headers=headers)
            return status, resp, cpu_s(pid) - c0

        base = max(timed(meta_body(False, size, False))[2] for _ in range(2))
        hwm0 = hwm_kb(pid)
        cases = [(False, None, 200, None), (True, None, 401, "unauthorized"),
                 (True, auth, 400, "invalid_field")]
        # The same probes without an attack first: on a shared machine the
        # scheduler alone adds delays. Each attack is a 4 MiB body that a
        # worker reads and scans (~50 ms of CPU, more on a loaded machine):
        # a probe queued behind two of them may wait for both, so the bound
        # here is four times the suite's target (before: 1.4 s of CPU per
        # attack, /healthz p50 1.2 s with two attackers).
        idle = Prober(s)
        with idle:
            time.sleep(1.5)
        limit = 4 * target(s) + idle.p99()
        print("     idle probes: p99 %.0f ms; target under attack %.0f ms"
              % (idle.p99() * 1e3, limit * 1e3))
        with Prober(s, limit):
            for register, headers, want, code in cases:
                status, resp, cpu = timed(meta_body(register, size), headers)
                check(status == want, "%s: %r", want, resp)
                if code:
                    check(resp["error"]["code"] == code, resp)
                print("     register=%s auth=%s: %d, CPU %.0f ms (a plain 4 MiB body: %.0f ms)"
                      % (register, headers is not None, status, cpu * 1e3, base * 1e3))
                check(cpu <= 3 * base + 0.15 * slow, "CPU %.2f s, plain body %.2f s", cpu, base)
            errors = []

            def attack(i):
                try:
                    register, headers, want, _ = cases[i % len(cases)]
                    status, _, _ = s.request("POST", "/check-original",
                                             meta_body(register, size),
                                             {"Content-Type": "application/json", **(headers or {})},
                                             timeout=60)
                    if status != want:
                        errors.append(status)
                except OSError as e:
                    errors.append(repr(e))

            def at_once(k):
                threads = [threading.Thread(target=attack, args=(i,)) for i in range(k)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                check(not errors, errors)

            at_once(2)  # two clients pushed /healthz p50 to 1.2 s
        at_once(4)  # four at once reached 677 MB
        grown = hwm_kb(pid) - hwm0
        print("     peak RSS grew by %d KB" % grown)
        check(grown < 64 * 1024 * slow, "peak RSS grew by %d KB", grown)


DELAY_MS = 15000  # each fsync while slow_disk_sheds_load's first commit is in flight


@T.test
def slow_disk_sheds_load(srv):
    """Suspected in a review, confirmed: with the store's queue full (a slow
    disk), nd_store_put() waited for room on the worker's loop, holding the
    registry's writer lock, so that loop answered nothing, not even
    /healthz, until the commit in flight ended (measured: 4.7 s of /healthz
    with 5 s fsyncs). Now a registration that finds the queue full is
    answered 503 storage_unavailable with Retry-After: 1, nothing stored,
    and the loop goes on. Here one worker, fsync slowed to DELAY_MS per call
    (LD_PRELOAD shim) during the first commit, 160 registrations of 1 MB of
    meta (the queue holds 64 MiB; the long commit leaves a loaded two-core
    machine time to read them): the worker thread never sleeps in a lock
    or condition wait for long, and some registrations are shed."""
    if sanitized(srv):
        # Filling 64 MiB of queue within one commit needs the normal
        # build's speed (~20 ms of CPU per 1 MB registration; about ten
        # times that under ASan on a shared machine): the code path is
        # the same, the normal build's run is the one that counts.
        print("     (sanitizer build: too slow to fill the store's queue in time, skipped)")
        return
    delay = os.path.join(srv.tmp, "fsync-delay")
    n, meta = 160, "m" * 1000000
    with Server(["--max-meta", "1M", "--request-timeout", "120", "--timeout", "120",
                 "--no-access-log"], sync=True, env=fsync_shim_env(delay_file=delay),
                threads=1) as s:
        with open(delay, "w") as f:
            f.write(str(DELAY_MS))
        rnd = random.Random(16)
        lat, stop = [], []

        def probe():
            query = json.dumps({"text": LONG}).encode()
            while not stop:
                for method, path, body in (("GET", "/healthz", None),
                                           ("POST", "/check-original", query)):
                    t0 = time.monotonic()
                    status, _, _ = s.request(method, path, body,
                                             {"Content-Type": "application/json"}, timeout=60)
                    lat.append((time.monotonic() - t0, path, status))
                time.sleep(0.1)

        def blocked_worker():
            """The longest time the worker thread slept in a futex (a lock
            or condition wait) without a break, sampled every 10 ms: a
            starved but runnable thread does not count, only a waiting one."""
            pid = s.proc.pid
            tids = [t for t in os.listdir("/proc/%d/task" % pid)
                    if open("/proc/%d/task/%s/comm" % (pid, t)).read().startswith("nd-worker")]
            since = None
            while not stop:
                now = time.monotonic()
                try:
                    with open("/proc/%d/task/%s/wchan" % (pid, tids[0])) as f:
                        waiting = "futex" in f.read()
                except OSError:
                    waiting = False
                if waiting and since is None:
                    since = now
                elif not waiting and since is not None:
                    blocked.append(now - since)
                    since = None
                time.sleep(0.01)
            if since is not None:
                blocked.append(time.monotonic() - since)

        blocked = [0.0]
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        sampler = threading.Thread(target=blocked_worker, daemon=True)
        sampler.start()
        socks = []
        t0 = time.monotonic()
        for i in range(n):
            text = " ".join("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz")
                                    for _ in range(rnd.randint(3, 9))) for _ in range(70))
            body = json.dumps({"id": "slow-%d" % i, "register": True, "text": text,
                               "meta": {"m": meta}}).encode()
            c = socket.create_connection((HOST, s.port), timeout=120)
            c.sendall(b"POST /check-original HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            socks.append(c)
        sent = time.monotonic() - t0
        time.sleep(max(0.0, DELAY_MS / 1000 * 2 + 1 - sent))  # the first commit (two fsyncs)
        stop.append(True)
        sampler.join(60)
        os.unlink(delay)
        prober.join(60)
        answers = {}
        for i, c in enumerate(socks):
            out = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                out += chunk
            c.close()
            resp = responses(out)
            check(len(resp) == 1, "registration %d: %r", i, out[:200])
            answers[i] = resp[0]
        shed = [i for i, a in answers.items() if a[0] == 503]
        done = [i for i, a in answers.items() if a[0] == 200]
        check(len(shed) + len(done) == n, {a[0] for a in answers.values()})
        for i in shed:
            json_error(answers[i], 503, "storage_unavailable")
            check(answers[i][1].get("retry-after") == "1", answers[i][1])
        for i in done[:3] + shed[:3]:
            status, _, _ = s.request("GET", "/documents/slow-%d" % i)
            check(status == (200 if i in done else 404), "slow-%d: %s", i, status)
        worst = max(lat)
        print("     sent in %.1f s; %d registered, %d shed (503); the worker waited at most "
              "%.0f ms at a time; %d probes, slowest %.0f ms (%s; the machine's load average "
              "%.1f)" % (sent, len(done), len(shed), max(blocked) * 1e3, len(lat),
                         worst[0] * 1e3, worst[1], os.getloadavg()[0]))
        check(all(st == 200 for _, _, st in lat), lat)
        check(shed, "no registration was shed: the queue never filled")
        # The loop never waits for the commit (8 s per fsync here): short
        # waits for the registry's writer lock only. Probe latencies are
        # printed, not asserted: 100 MB of bodies to read on a shared
        # two-core machine make them noisy.
        check(max(blocked) < 1.0, "the worker waited %.1f s in a row", max(blocked))


@T.test
def wrong_types(srv):
    values = [None, True, False, 0, -1, 1.5, 1e300, "", "x", [], ["x"], {}, {"a": 1}]
    fields = {"/fingerprint": ["text", "texts"],
              "/check-original": ["text", "id", "register", "k", "meta"]}
    for path, names in fields.items():
        for name in names:
            for v in values:
                req = {"text": LONG} if path == "/check-original" else {}
                req[name] = v
                status, resp = post(srv, path, json.dumps(req).encode())
                check(status in (200, 400, 422), "%s %s=%r: %s %r", path, name, v, status, resp)
                if status == 400:
                    check(resp["error"]["code"] == "invalid_field", resp)
                    check(resp["error"]["field"].startswith(name) or
                          resp["error"]["field"] in ("text", "id"), resp)


@T.test
def invalid_utf8(srv):
    bad = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8", b"\x80"]
    for b in bad:
        status, resp = post(srv, "/fingerprint", b"{\"text\": \"a" + b + b"\"}")
        expect_error(status, resp, 400, "invalid_json")
        status, resp = post(srv, "/check-original",
                            b"{\"text\": \"a\", \"id\": \"x" + b + b"\"}")
        expect_error(status, resp, 400, "invalid_json")
        status, resp = post(srv, "/fingerprint", b"{\"t" + b + b"\": 1}")
        expect_error(status, resp, 400, "invalid_json")
        status, resp = post(srv, "/fingerprint", b"plain " + b + b" text", ctype="text/plain")
        expect_error(status, resp, 400, "invalid_field")
        status, _, data = srv.request("GET", "/documents/x%" + b.hex("%").upper())
        expect_error(status, json.loads(data), 400, "invalid_field")
    # In a header: ignored (X-Request-Id) or refused, never a crash.
    out, _ = raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: \xff\xfe\r\n"
                      b"Connection: close\r\n\r\n")
    resp = responses(out)
    check(resp and resp[0][0] == 200 and resp[0][1]["x-request-id"] != "\xff\xfe", out[:200])


@T.test
def nul_bytes(srv):
    status, resp = post(srv, "/fingerprint", b"{\"text\": \"a\x00b\"}")
    expect_error(status, resp, 400, "invalid_json")
    status, resp = post(srv, "/fingerprint", b"{\"text\": \"a\x00b\"}"[:-1] + b"\x00}")
    expect_error(status, resp, 400, "invalid_json")
    status, resp = post(srv, "/fingerprint", b"{\"text\": \"a\\u0000b\"}")
    check(status == 200, resp)
    status, resp = post(srv, "/fingerprint", b"a\x00b\x00" * 100, ctype="text/plain")
    check(status == 200, resp)
    status, resp = post(srv, "/check-original", b"{\"text\": \"a\", \"id\": \"a\\u0000b\"}")
    expect_error(status, resp, 400, "invalid_field")
    status, _, data = srv.request("GET", "/documents/a%00b")
    expect_error(status, json.loads(data), 400, "invalid_field")
    for data in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\nConnection: close\r\n\r\n",
                 b"GET /heal\x00thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 b"\x00" * 64 + b"\r\n\r\n"):
        out, dt = raw(srv, data)
        resp = responses(out)
        check(resp and resp[0][0] in (200, 400, 404), out[:200])
        if resp[0][0] != 200:
            check(json.loads(resp[0][2])["error"]["code"] in ("bad_request", "not_found"), out)


@T.test
def empty_and_oversized_bodies(srv):
    status, resp = post(srv, "/fingerprint", b"")
    expect_error(status, resp, 400, "invalid_json")
    status, resp = post(srv, "/check-original", b"")
    expect_error(status, resp, 400, "invalid_json")
    status, resp = post(srv, "/fingerprint", b"", ctype="text/plain")
    check(status == 200 and resp["chars"] == 0, resp)
    status, resp = post(srv, "/fingerprint", b"{\"text\": \"" + b"a" * (2 << 20) + b"\"}")
    err = expect_error(status, resp, 413, "body_too_large")
    check("1048576" in err["message"], err)
    # --max-text (100K) per text, whatever the body size.
    status, resp = post(srv, "/fingerprint", json.dumps({"text": "b" * 200000}).encode())
    err = expect_error(status, resp, 400, "invalid_field", "text")
    check("102400" in err["message"], err)
    status, resp = post(srv, "/fingerprint", b"c" * 200000, ctype="text/plain")
    expect_error(status, resp, 400, "invalid_field", "text")
    status, resp = post(srv, "/fingerprint", json.dumps({"texts": ["a", "d" * 200000]}).encode())
    expect_error(status, resp, 400, "invalid_field", "texts[1]")
    status, resp = post(srv, "/check-original", json.dumps({"text": "e" * 200000}).encode())
    expect_error(status, resp, 400, "invalid_field", "text")
    status, resp = post(srv, "/fingerprint", json.dumps({"texts": ["f"] * 1001}).encode())
    expect_error(status, resp, 400, "invalid_field", "texts")
    # Declared over the limit, body never sent: bounded by the request timeout.
    out, dt = raw(srv, b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       b"\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
                  timeout=TIMEOUT_S + 5)
    check(b"<timeout>" not in out and dt < TIMEOUT_S + 2, "not closed: %.1fs %r", dt, out[:100])


def chunked(body, sizes):
    out, i = b"", 0
    for n in sizes:
        out += b"%x\r\n%s\r\n" % (n, body[i:i + n])
        i += n
    if i < len(body):
        out += b"%x\r\n%s\r\n" % (len(body) - i, body[i:])
    return out + b"0\r\n\r\n"


@T.test
def chunked_bodies(srv):
    head = (b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    body = json.dumps({"text": LONG}).encode()
    status, want = post(srv, "/fingerprint", body)
    for sizes in ([len(body)], [1] * 50, [7, 300, 1]):
        out, _ = raw(srv, head + chunked(body, sizes))
        resp = responses(out)
        check(resp and resp[0][0] == 200 and json.loads(resp[0][2]) == want, out[:300])
    # Malformed or oversized chunks: a JSON 413 (libevent's status for both).
    for bad in (b"zz\r\nabc\r\n0\r\n\r\n", b"-5\r\nabc\r\n", b"ffffffffffffffffff\r\nabc\r\n",
                b"7fffffff\r\nabc\r\n", b"5;ext=1\r\nabcde\r\n0\r\n\r\n",
                chunked(b"x" * (1100 << 10), [1 << 19] * 2)):
        out, dt = raw(srv, head + bad, timeout=TIMEOUT_S + 5)
        resp = responses(out)
        check(resp, "no answer to %r: %r", bad[:30], out[:200])
        json_error(resp[0], 413, "body_too_large")
    # Chunked and Content-Length together: refused (request smuggling).
    out, _ = raw(srv, head.replace(b"Connection", b"Content-Length: 3\r\nConnection") +
                 chunked(body, [10]))
    json_error(responses(out)[0], 400, "bad_request")
    # Two different Content-Lengths: refused and closed.
    out, dt = raw(srv, b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       b"\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}}")
    resp = responses(out)
    json_error(resp[0], 400, "bad_request")
    check(resp[0][1].get("connection") == "close" and dt < 2, resp[0][1])
    # Stops in the middle of a chunk: bounded by the request timeout.
    out, dt = raw(srv, head + b"100\r\nabc", timeout=TIMEOUT_S + 5)
    check(b"<timeout>" not in out and dt < TIMEOUT_S + 2, "not closed: %.1fs", dt)


@T.test
def content_type(srv):
    body = json.dumps({"text": LONG}).encode()
    for ctype in (None, "", "text/html", "application/jsonx", "application/json-seq",
                  "application/json; charset=latin1", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", "json", "*/*", "application/json\x7f"):
        status, resp = post(srv, "/check-original", body, ctype=ctype)
        expect_error(status, resp, 415, "unsupported_media_type")
    for ctype in ("application/json", "APPLICATION/JSON", "application/json;charset=UTF-8",
                  "application/json; charset=\"utf-8\"", " application/json ; charset=utf8"):
        status, resp = post(srv, "/check-original", body, ctype=ctype)
        check(status == 200, "%r: %s %r", ctype, status, resp)
    status, resp = post(srv, "/fingerprint", LONG.encode(), ctype="text/plain; charset=utf-8")
    check(status == 200, resp)


# ---- the HTTP layer ----

@T.test
def huge_and_numerous_headers(srv):
    ok = b"".join(b"X-H%d: v\r\n" % i for i in range(1000))  # ~10 KB: under 16 KiB
    out, _ = raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + ok + b"Connection: close\r\n\r\n")
    check(responses(out)[0][0] == 200, out[:200])
    out, _ = raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 15000 +
                 b"\r\nConnection: close\r\n\r\n")
    check(responses(out)[0][0] == 200, out[:200])
    # Over the limit (a few times it, so that the request is sent whole
    # before the answer and the close): a JSON error, quickly.
    for data in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" +
                 b"".join(b"X-H%d: v\r\n" % i for i in range(4000)) + b"\r\n",
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
                 b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"):
        out, dt = raw(srv, data)
        resp = responses(out)
        check(resp, "no answer: %r", out[:200])
        check(resp[0][0] in (400, 413), resp[0][0])
        json_error(resp[0], resp[0][0], "bad_request" if resp[0][0] == 400 else "body_too_large")
        check(dt < 3, "slow: %.1fs", dt)


@T.test
def http_1_0(srv):
    out, dt = raw(srv, b"GET /healthz HTTP/1.0\r\n\r\n")
    resp = responses(out)
    check(resp and resp[0][0] == 200 and out.startswith(b"HTTP/1.0 200"), out[:100])
    check(dt < 2, "not closed after an HTTP/1.0 answer: %.1fs", dt)
    body = json.dumps({"text": "x"}).encode()
    out, dt = raw(srv, b"POST /fingerprint HTTP/1.0\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    check(responses(out)[0][0] == 200, out[:200])
    # Keep-alive on HTTP/1.0: two requests, then the idle connection is
    # closed by the request timeout.
    out, dt = raw(srv, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2,
                  timeout=TIMEOUT_S + 5)
    check(len(responses(out)) == 2 and TIMEOUT_S - 0.5 < dt < TIMEOUT_S + 2,
          "%.1fs %r", dt, out[:200])
    for line in (b"GET /healthz\r\n\r\n", b"GET /healthz HTTP/2.0\r\n\r\n",
                 b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"GET /healthz HTTP/1.1 extra\r\n\r\n",
                 b"BREW /healthz HTTP/1.1\r\n\r\n"):
        out, dt = raw(srv, line)
        resp = responses(out)
        check(resp and resp[0][0] in (200, 400, 501, 505), "%r: %r", line, out[:200])
        if resp[0][0] >= 400:
            json.loads(resp[0][2])


@T.test
def pipelined_requests(srv):
    reqs = b""
    bodies = []
    for i in range(20):
        body = json.dumps({"text": "pipelined text %d" % i}).encode()
        bodies.append(body)
        reqs += (b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nX-Request-Id: p%d\r\n\r\n%s" % (len(body), i, body))
    reqs += b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    out, _ = raw(srv, reqs)
    resp = responses(out)
    check(len(resp) == 21, "%d answers", len(resp))
    for i, (st, hdrs, body) in enumerate(resp[:20]):
        check(st == 200 and hdrs["x-request-id"] == "p%d" % i, (i, st, hdrs))
        status, want = post(srv, "/fingerprint", bodies[i])
        check(json.loads(body) == want, i)
    check(resp[20][0] == 200, resp[20])


@T.test
def pipeline_flood_without_reading(srv):
    """A client pipelines requests and never reads the answers: the server
    stops reading once its buffer for the connection is full, instead of
    buffering without bound."""
    rss0 = rss_kb(srv)
    with Prober(srv):
        s = socket.create_connection((HOST, srv.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(0.5)
        req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3 and sent < (200 << 20):
            try:
                sent += s.send(req)
            except socket.timeout:
                break
        grown = rss_kb(srv) - rss0
        s.close()
    print("     sent %.1f MB before the server stopped reading; RSS +%d KB" % (sent / 1e6, grown))
    check(sent < (100 << 20), "the server read %d MB without answering" % (sent >> 20))
    if not sanitized(srv):
        check(grown < 64 * 1024, "RSS grew by %d KB", grown)
    still_serving(srv)


@T.test
def slowloris(srv):
    """Headers a byte at a time, from 50 clients: each is cut off at the
    request timeout, while other clients are served."""
    socks = []
    for _ in range(50):
        s = socket.create_connection((HOST, srv.port))
        s.setblocking(False)
        socks.append(s)
    line = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
    closed_at = {}
    t0 = time.monotonic()
    with Prober(srv):
        for i in range(len(line)):
            now = time.monotonic() - t0
            if now > TIMEOUT_S + 3 or len(closed_at) == len(socks):
                break
            for k, s in enumerate(socks):
                if k in closed_at:
                    continue
                try:
                    s.send(line[i:i + 1])
                    if s.recv(1) == b"":
                        closed_at[k] = now
                except BlockingIOError:
                    pass
                except OSError:
                    closed_at[k] = now
            time.sleep(0.1)
    for s in socks:
        s.close()
    check(len(closed_at) == len(socks), "%d of %d slow clients still connected after %.1fs",
          len(socks) - len(closed_at), len(socks), time.monotonic() - t0)
    last = max(closed_at.values())
    print("     50 slow clients cut off after %.1f-%.1fs" % (min(closed_at.values()), last))
    check(TIMEOUT_S - 0.5 < last < TIMEOUT_S + 1.5, "cut off after %.1fs", last)


@T.test
def idle_connections_5000(srv):
    hard = raise_nofile()
    n = min(5000, hard - 400)
    if n < 5000:
        print("     RLIMIT_NOFILE hard limit %d: %d idle connections only" % (hard, n))
    with Server(["--request-timeout", "30"], in_memory=True) as s2:
        rss0 = rss_kb(s2)
        socks = []
        t0 = time.monotonic()
        with Prober(s2):
            for i in range(n):
                socks.append(socket.create_connection((HOST, s2.port), timeout=10))
            time.sleep(0.5)
            opened = time.monotonic() - t0
            # They are all held, not refused: each still answers.
            for s in socks[:5] + socks[-5:]:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                check(s.recv(4096).startswith(b"HTTP/1.1 200"), "an idle connection was lost")
            m = s2.metrics()
            time.sleep(1.0)
        grown = rss_kb(s2) - rss0
        for s in socks:
            s.close()
        print("     %d idle connections opened in %.1fs, RSS +%d KB (%.1f KB each)" % (
            n, opened, grown, grown / n))
        fds = m.get("process_open_fds")
        if fds is not None:
            check(fds >= n, "the server holds %s descriptors for %d connections", fds, n)
        if not sanitized(s2):
            check(grown < n * 16, "RSS grew by %d KB", grown)
        time.sleep(0.5)
        still_serving(s2)


@T.test
def connection_limit(srv):
    with Server(["--max-connections", "40"], in_memory=True) as s2:
        socks = [socket.create_connection((HOST, s2.port), timeout=5) for _ in range(40)]
        time.sleep(0.3)
        refused = 0
        for _ in range(10):
            out, dt = raw(s2, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5)
            check(dt < 2, "not refused promptly: %.1fs", dt)
            resp = responses(out)
            if resp:  # a 503 JSON, or (if the request crossed the close) a reset
                json_error(resp[0], 503, "too_many_connections")
                check(resp[0][1].get("retry-after") == "1", resp[0][1])
            refused += 1
        check(refused == 10)
        for s in socks[:20]:
            s.close()
        time.sleep(0.3)
        with Prober(s2):
            time.sleep(1)
        for s in socks[20:]:
            s.close()
        check(any(r.get("msg", "").startswith("connection limit reached")
                  for r in s2.log_records()), "no warning logged")


@T.test
def disconnect_mid_body(srv):
    rss0 = rss_kb(srv)
    body = json.dumps({"text": LONG * 20}).encode()
    with Prober(srv):
        for round_ in range(3):
            socks = []
            for i in range(100):
                s = socket.create_connection((HOST, srv.port))
                s.sendall(b"POST /check-original HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(body), body[:(i * 97) % len(body)]))
                socks.append(s)
            for s in socks:
                if round_ == 1:  # a reset instead of a FIN
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                s.close()
        # And leaving while the answer is being written.
        for i in range(20):
            s = socket.create_connection((HOST, srv.port))
            big = json.dumps({"texts": [LONG] * 200}).encode()
            s.sendall(b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      b"\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big))
            s.recv(10)
            s.close()
    time.sleep(0.5)
    m = srv.metrics()
    check(m.get("neardup_inflight_requests", 0) <= 1, "requests left in flight: %r",
          m.get("neardup_inflight_requests"))
    if not sanitized(srv):
        grown = rss_kb(srv) - rss0
        check(grown < 32 * 1024, "RSS grew by %d KB", grown)
    still_serving(srv)


@T.test
def memory_stays_bounded(srv):
    """The whole suite again, a second time: the server's memory after it is
    about what it was after the first time (no growth per round)."""
    if sanitized(srv):
        print("     (sanitizer build: RSS not comparable, skipped)")
        return
    rss = []
    for _ in range(2):
        invalid_json(srv)
        wrong_types(srv)
        chunked_bodies(srv)
        pipelined_requests(srv)
        huge_and_numerous_headers(srv)
        rss.append(rss_kb(srv))
    print("     RSS after round 1: %d KB, after round 2: %d KB" % tuple(rss))
    check(rss[1] - rss[0] < 8 * 1024, "RSS grew by %d KB in a round", rss[1] - rss[0])


@T.test
def workflow_endpoints(srv):
    """The originality workflow's endpoints and fields against hostile
    input: bad JSON, wrong types, oversized lists, bad cursors and limits,
    unknown ids, missing or wrong tokens, wrong methods and media types:
    each a clear JSON error."""
    import tempfile
    tok = "badinput-token-0123456789abcdef"
    tmp = tempfile.mkdtemp(prefix="neardup-badinput-")
    tf = os.path.join(tmp, "tokens")
    with open(tf, "w") as f:
        f.write("ops %s\n" % tok)
    os.chmod(tf, 0o600)
    auth = {"Authorization": "Bearer " + tok}
    values = [None, True, 0, 1.5, "", "x", [], ["x"], {}, {"a": 1}]
    with Server(["--token-file", tf], in_memory=True) as s:
        status, body = s.json("POST", "/check-original", {"id": "w-1", "text": LONG,
                                                          "register": True}, headers=auth)
        check(status == 200 and body["registered"], body)
        # The check's new fields.
        for name in ("account", "reprint", "whitelist"):
            for v in values + ["a\u0001b", "x" * 257]:
                if name == "reprint" and v in ("allow", "forbid"):
                    continue
                status, resp = post(s, "/check-original", json.dumps({"text": LONG, name: v}).encode())
                if name == "whitelist" and v == []:
                    check(status == 200, resp)
                    continue
                if name == "account" and v in ("x",):
                    check(status == 200, resp)
                    continue
                expect_error(status, resp, 400, "invalid_field")
                check(resp["error"]["field"].startswith(name), resp)
        for wl, field in (([{"account": "a"}, {"account": "a"}], "whitelist[1].account"),
                          ([{"account": "a", "may_modify": "yes"}], "whitelist[0].may_modify"),
                          ([{"account": "a", "may_hide_source": None}],
                           "whitelist[0].may_hide_source"),
                          ([{"may_modify": True}], "whitelist[0].account"),
                          ([5], "whitelist[0]"),
                          ([{"account": "a%d" % i} for i in range(257)], "whitelist"),
                          ([{"account": "a", "account": "b"}], None)):
            status, resp = post(s, "/check-original", json.dumps({"text": LONG, "whitelist": wl}).encode())
            if field is None:
                continue
            expect_error(status, resp, 400, "invalid_field", field)
        status, resp = post(s, "/check-original",
                            b'{"text": %s, "whitelist": [{"account": "a", "account": "b"}]}'
                            % json.dumps(LONG).encode())
        expect_error(status, resp, 400, "invalid_field", "whitelist")
        # Policy bodies.
        url = "/documents/w-1/policy"
        for raw in (b"", b"{", b"[]", b'{"reprint": "allow",}', b"\xff", b'{"a":1}{}'):
            status, _, data = s.request("PUT", url, raw, dict(auth, **{"Content-Type":
                                                                       "application/json"}))
            err = expect_error(status, json.loads(data), 400, "invalid_json")
        for name in ("reprint", "whitelist"):
            for v in values:
                status, resp = s.json("PATCH", url, {name: v}, headers=auth)
                if name == "whitelist" and v == []:
                    check(status == 200, resp)
                    continue
                expect_error(status, resp, 400, "invalid_field")
                check(resp["error"]["field"].startswith(name), resp)
        status, _, data = s.request("PUT", url, b"reprint=allow",
                                    dict(auth, **{"Content-Type": "application/x-www-form-urlencoded"}))
        expect_error(status, json.loads(data), 415, "unsupported_media_type")
        for method, path, body in (("PUT", url, {}), ("PATCH", url, {}),
                                   ("POST", "/documents/w-1/revoke", None),
                                   ("POST", "/documents/w-1/restore", None),
                                   ("GET", "/audit", None)):
            for hdrs, wrong in ((None, False), ({"Authorization": "Bearer wrong-token-0123456789"},
                                                True), ({"Authorization": "Basic abc"}, False)):
                status, resp = s.json(method, path, body, headers=hdrs)
                err = expect_error(status, resp, 401, "unauthorized")
        for method, path in (("PUT", "/documents/nope/policy"), ("PATCH", "/documents/nope/policy"),
                             ("POST", "/documents/nope/revoke"), ("POST", "/documents/nope/restore"),
                             ("GET", "/documents/nope/copies")):
            status, resp = s.json(method, path, {} if method != "GET" else None, headers=auth)
            err = expect_error(status, resp, 404, "not_found")
            check(err.get("id") == "nope", err)
        for method, path, allow in (("GET", url, "PUT, PATCH"), ("POST", url, "PUT, PATCH"),
                                    ("GET", "/documents/w-1/revoke", "POST"),
                                    ("DELETE", "/documents/w-1/restore", "POST"),
                                    ("POST", "/documents/w-1/copies", "GET, HEAD"),
                                    ("PUT", "/documents/w-1", "GET, HEAD, DELETE"),
                                    ("POST", "/audit", "GET, HEAD")):
            status, hdrs, data = s.request(method, path, b"{}", dict(auth, **{
                "Content-Type": "application/json"}))
            expect_error(status, json.loads(data), 405, "method_not_allowed")
            check(hdrs.get("allow") == allow, "%s %s: Allow %r", method, path, hdrs.get("allow"))
        status, resp = s.json("PUT", "/documents/a%01b/policy", {}, headers=auth)
        expect_error(status, resp, 400, "invalid_field", "id")
        # Reasons.
        for v in values[:-2] + ["é" * 1025]:
            if isinstance(v, str) and len(v) <= 1024:
                continue
            status, resp = s.json("POST", "/documents/w-1/revoke", {"reason": v}, headers=auth)
            expect_error(status, resp, 400, "invalid_field", "reason")
        status, _, data = s.request("POST", "/documents/w-1/revoke", b"{nope",
                                    dict(auth, **{"Content-Type": "application/json"}))
        expect_error(status, json.loads(data), 400, "invalid_json")
        status, _, data = s.request("POST", "/documents/w-1/revoke", b"reason",
                                    dict(auth, **{"Content-Type": "text/plain"}))
        expect_error(status, json.loads(data), 415, "unsupported_media_type")
        status, resp = s.json("POST", "/documents/w-1/restore", None, headers=auth)
        check(status == 200 and resp["status"] == "active", resp)  # no body: fine
        # Lists: limits and cursors.
        good = None
        for i in range(3):
            # (a detection is recorded only for a token that may act for it)
            s.json("POST", "/check-original", {"id": "c-%d" % i, "text": LONG}, headers=auth)
        status, page = s.json("GET", "/documents/w-1/copies?limit=1")
        check(status == 200 and page["next_cursor"], page)
        good = page["next_cursor"]
        bad_cursors = ["x", "%00", "%FF%FE", "A" * 28, "A" * 39, "A" * 2000, good[:-1],
                       good[:-1] + ("A" if good[-1] != "A" else "B"), good + "A", good.lower(),
                       "%2B" * 28, good.replace("-", "+")]
        for c in bad_cursors:
            if c == good:
                continue
            for path in ("/documents/w-1/copies?cursor=", "/audit?cursor="):
                status, resp = s.json("GET", path + c, headers=auth)
                expect_error(status, resp, 400, "invalid_field", "cursor")
        # A copies cursor is not an audit cursor, nor another document's.
        status, resp = s.json("GET", "/audit?cursor=" + good, headers=auth)
        expect_error(status, resp, 400, "invalid_field", "cursor")
        for q in ("limit=", "limit=0", "limit=-1", "limit=1001", "limit=1e2", "limit=99999999999",
                  "limit=%31%30", "limit=1&limit=1"):
            status, resp = s.json("GET", "/documents/w-1/copies?" + q)
            if q == "limit=%31%30":
                check(status == 200 and len(resp["copies"]) == 3, resp)
                continue
            expect_error(status, resp, 400, "invalid_field", "limit")
        for q in ("document=", "document=%01", "document=" + "x" * 257, "document=a&document=b"):
            status, resp = s.json("GET", "/audit?" + q, headers=auth)
            expect_error(status, resp, 400, "invalid_field", "document")
        status, resp = s.json("GET", "/documents/w-1/copies?unknown=1&cursor=" + good)
        check(status == 200 and len(resp["copies"]) == 2, resp)
        still_serving(s)


@T.test
def import_endpoint(srv):
    """POST /import against hostile bodies: every line that is not a valid
    registration is refused on its own (an event with its code) and the
    rest go on; whole-body faults are clear errors; nothing crashes, and
    what was acknowledged is there."""
    ndj = "application/x-ndjson"
    good = json.dumps({"id": "imp-ok", "text": LONG, "registered_at": "2024-01-01T00:00:00Z"})
    hostile = [
        b"{", b"[]", b"42", b'"s"', b"null", b'{"id": "x"', b"\xff\xfe{}", b'{"id": "a\x00b"}',
        b'{"id": 5, "text": "t"}', b'{"id": "imp-t", "text": 5}', b'{"id": "imp-n"}',
        b'{"id": "imp-s", "text": "short"}',
        json.dumps({"id": "imp-u", "text": LONG[:400] + "\udcff"}).encode(),
        json.dumps({"id": "imp-ra", "text": LONG, "registered_at": [1]}).encode(),
        json.dumps({"id": "imp-rb", "text": LONG, "registered_at": "yesterday"}).encode(),
        json.dumps({"id": "imp-rc", "text": LONG, "registered_at": -5}).encode(),
        json.dumps({"id": "imp-rd", "text": LONG, "registered_at": 1.5}).encode(),
        json.dumps({"id": "imp-re", "text": LONG, "registered_at": "2024-13-40T99:99:99Z"}).encode(),
        json.dumps({"id": "imp-w", "text": LONG, "whitelist": "all"}).encode(),
        json.dumps({"id": "imp-r", "text": LONG, "reprint": "maybe"}).encode(),
        json.dumps({"id": "imp-a", "text": LONG, "account": ["x"]}).encode(),
        json.dumps({"id": "imp-m", "text": LONG, "meta": "m"}).encode(),
        json.dumps({"id": "x" * 300, "text": LONG}).encode(),
        b"[" * 600 + b"]" * 600,
        b'{"id": "imp-d", "text": ' + json.dumps(LONG).encode() + b', "meta": ' +
        b'{"a":' * 600 + b"1" + b"}" * 600 + b"}",
    ]
    body = b"\n".join(hostile) + b"\n\r\n  \n" + good.encode() + b"\n"
    status, resp = post(srv, "/import", body, ndj)
    check(status == 200, "%s %r", status, resp)
    sm = resp["summary"]
    check(sm["complete"] and sm["lines"] == len(hostile) + 1, sm)
    check(sm["errors"] == len(hostile) and sm["imported"] == 1, sm)
    check(len(resp["events"]) == len(hostile) and not resp["events_truncated"], resp)
    for ev in resp["events"]:
        check(isinstance(ev["line"], int) and 1 <= ev["line"] <= len(hostile), ev)
        check(isinstance(ev.get("code"), str) and ev["code"] and ev.get("message"), ev)
    lines = sorted(ev["line"] for ev in resp["events"])
    check(lines == list(range(1, len(hostile) + 1)), lines)
    status, doc = srv.json("GET", "/documents/imp-ok")
    check(status == 200 and doc["registered_at"] == "2024-01-01T00:00:00.000000Z", doc)
    # Whole-body faults.
    for raw_body, ctype, want, code in ((b"", ndj, 400, "empty_body"),
                                        (b"\n \r\n", ndj, 400, "empty_body"),
                                        (good.encode(), "text/plain", 415, "unsupported_media_type"),
                                        (good.encode(), None, 415, "unsupported_media_type"),
                                        (good.encode(), ndj + "; charset=latin1", 415,
                                         "unsupported_media_type")):
        status, resp = post(srv, "/import", raw_body, ctype)
        expect_error(status, resp, want, code)
    status, resp = post(srv, "/import", b"x" * (1024 * 1024 + 10), ndj)
    expect_error(status, resp, 413, "body_too_large")
    for method in ("GET", "PUT", "DELETE"):
        st, hdrs, data = srv.request(method, "/import", b"{}" if method == "PUT" else None,
                                     {"Content-Type": ndj} if method == "PUT" else {})
        expect_error(st, json.loads(data), 405, "method_not_allowed")
        check("POST" in hdrs.get("allow", ""), hdrs)
    # A body of 20,000 refused lines: the answer lists the first 10,000.
    status, resp = post(srv, "/import", b"{}\n" * 20000, ndj)
    check(status == 200 and resp["summary"]["errors"] == 20000, resp.get("summary"))
    check(len(resp["events"]) == 10000 and resp["events_truncated"], len(resp["events"]))
    # Sent again: nothing new, the same document.
    status, resp = post(srv, "/import", body, ndj)
    check(status == 200 and resp["summary"]["existing"] == 1 and resp["summary"]["imported"] == 0,
          resp["summary"])
    still_serving(srv)


def main():
    raise_nofile()
    with Server(ARGS, in_memory=True) as srv:
        T.run(srv)


if __name__ == "__main__":
    main()
