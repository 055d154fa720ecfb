"""Shared helpers for the integration tests: start the real neardupd on a free
loopback port with a temporary data directory, talk HTTP to it, stop it.

Standard library only. Every server started here is killed in a finally
block (Server is a context manager), and every request has a timeout.

Ports: neardupd is started with --listen 127.0.0.1:0, binds a free port
itself and logs it in its "listening" line, which we read from its stderr:
no race between choosing a port and binding it.
"""

import gzip
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("ND_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TEXTS_DIR = os.path.join(HERE, "texts")
HOST = "127.0.0.1"
RFC3339_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


# A small fixed English vocabulary for made-up articles (word_article()).
ARTICLE_WORDS = (
    "river town ferry horn baker quay ovens smell rye bread drifts water fishing boats "
    "knock gently against pier old man green coat walks dog along embankment morning "
    "hour nodding tram driver waits terminus thermos tea nobody writes things down yet "
    "they are what made small habits repeated until become shape place winter snow "
    "lamp harbour gull market cobble bridge clock tower chimney smoke lantern window "
    "garden orchard meadow hill valley forest path stone wall gate field barn mill").split()


def word_article(seed, words=80):
    """A made-up article of `words` words of ARTICLE_WORDS, a full stop
    after every 12th; the same for the same seed."""
    rnd = random.Random(seed)
    return " ".join(rnd.choice(ARTICLE_WORDS) + ("." if i % 12 == 11 else "")
                    for i in range(words))


def tool_path(env, default):
    """A built program: $env, else default (path parts) under the build
    directory that holds $NEARDUPD."""
    path = os.environ.get(env)
    if path:
        return path
    build = os.path.dirname(os.path.dirname(os.environ.get("NEARDUPD", "build/server/x")))
    return os.path.join(build, *default)


def neardup_path():
    """The command-line tool: $NEARDUP, else server/neardup beside $NEARDUPD."""
    return tool_path("NEARDUP", ("server", "neardup"))


def neardupd_path():
    path = os.environ.get("NEARDUPD")
    if path:
        return path
    for build in ("build", "build-server"):
        cand = os.path.join(SOURCE_ROOT, build, "server", "neardupd")
        if os.path.exists(cand):
            return cand
    raise RuntimeError("set NEARDUPD to the neardupd binary")


class Server:
    """A neardupd process. Use as a context manager:

        with Server(["--in-memory"]) as srv:
            status, body = srv.json("GET", "/healthz")
    """

    def __init__(self, args=(), data_dir=None, in_memory=False, wait_ready=True,
                 env=None, threads=2, start_timeout=30.0, port=None, sync=False):
        self.args = list(args)
        self.sync = sync  # True: fsync each commit as in production (no --no-sync)
        self.tmp = None
        if data_dir is None and not in_memory:
            self.tmp = tempfile.mkdtemp(prefix="neardupd-test-")
            data_dir = os.path.join(self.tmp, "data")
        self.data_dir = data_dir
        self.in_memory = in_memory
        self.wait_ready = wait_ready
        self.env = env
        self.threads = threads
        self.start_timeout = start_timeout
        self.proc = None
        self.fixed_port = port  # listen here instead of on a port from the log
        self.port = None
        self.log_path = None
        self._log_file = None

    # -- life cycle --

    def start(self):
        cmd = [neardupd_path(), "--listen", "%s:%d" % (HOST, self.fixed_port or 0),
               "--threads", str(self.threads)]
        if not self.sync:
            cmd.append("--no-sync")
        if self.in_memory:
            cmd.append("--in-memory")
        else:
            cmd += ["--data", self.data_dir]
        cmd += self.args
        if self.tmp is None:
            self.tmp = tempfile.mkdtemp(prefix="neardupd-test-")
        self.log_path = os.path.join(self.tmp, "stderr-%d.log" % time.monotonic_ns())
        self._log_file = open(self.log_path, "wb")
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("NEARDUP_"):
                del env[k]
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self._log_file, env=env)
        deadline = time.monotonic() + self.start_timeout
        if self.fixed_port:
            self.port = self.fixed_port
        while self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError("neardupd exited with %s at start:\n%s"
                                   % (self.proc.returncode, self.log_text()))
            if time.monotonic() > deadline:
                raise RuntimeError("neardupd did not log its port:\n" + self.log_text())
            for rec in self.log_records():
                if rec.get("msg") == "listening":
                    self.port = rec["port"]
            time.sleep(0.02)
        if self.wait_ready:
            self.wait_for_ready(deadline - time.monotonic())
        return self

    def wait_for_ready(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, _, _ = self.request("GET", "/readyz", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("neardupd exited:\n" + self.log_text())
            if time.monotonic() > deadline:
                raise RuntimeError("neardupd not ready:\n" + self.log_text())
            time.sleep(0.02)

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout=30.0):
        """Waits for exit; returns the exit code (negative: killed by signal)."""
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=30.0):
        """SIGTERM and wait; returns the exit code. Kills after timeout."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("neardupd did not stop within %.0f s" % timeout)
        return self.proc.returncode

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self, args=None, wait_ready=True):
        """Stops (if running) and starts again on the same data directory."""
        if self.proc and self.proc.poll() is None:
            self.stop()
        self.check_sanitizers()
        self._close_log()
        if args is not None:
            self.args = list(args)
        self.port = None
        self.wait_ready = wait_ready
        return self.start()

    def _close_log(self):
        if self._log_file:
            self._log_file.close()
            self._log_file = None

    def cleanup(self):
        self.kill()
        self._close_log()
        if self.tmp and os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and self.proc and self.proc.poll() is None:
                code = self.stop()
                check(code == 0, "neardupd exited %s at SIGTERM:\n%s", code, self.log_tail())
            if exc_type is None:
                self.check_sanitizers()
        finally:
            self.cleanup()
        return False

    def check_sanitizers(self):
        """Fails if the log holds a sanitizer report (ASan, UBSan, LSan)."""
        text = self.log_text()
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer"):
            check(mark not in text, "sanitizer report in the server log:\n%s", text[-6000:])

    def log_tail(self, n=20):
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- logs --

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def log_records(self):
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def log_records_until(self, want, timeout=3.0):
        """The log records once want(records) holds, or at the timeout:
        each worker writes its access-log lines at its tick (100 ms), so a
        line may come a tick or more after its answer."""
        deadline = time.monotonic() + timeout
        while True:
            recs = self.log_records()
            if want(recs) or time.monotonic() > deadline:
                return recs
            time.sleep(0.05)

    # -- HTTP --

    def connect(self, timeout=30):
        return http.client.HTTPConnection(HOST, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30, conn=None):
        """One request; returns (status, headers dict lower-cased, body bytes)."""
        return request(conn or self.connect(timeout), method, path, body, headers,
                       close=conn is None)

    def json(self, method, path, obj=None, headers=None, timeout=30, conn=None, raw=None):
        """Sends obj as JSON (or raw bytes); returns (status, parsed body or None)."""
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        body = raw if raw is not None else (None if obj is None else
                                            json.dumps(obj).encode("utf-8"))
        if body is None:
            hdrs.pop("Content-Type")
        status, _, data = self.request(method, path, body, hdrs, timeout, conn)
        return status, parse_json(data)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200, status
        return parse_metrics(data.decode())


def fsync_shim_env(delay_file=None, fail_file=None, env=None):
    """Environment for a Server whose fsync/fdatasync the test controls
    (tests/shim/fsync_shim.c, preloaded): while delay_file exists each call
    first sleeps the milliseconds written in it; while fail_file exists each
    call fails with EIO. Start the Server with sync=True, or LMDB never
    syncs. Raises RuntimeError when the shim was not built ($ND_FSYNC_SHIM)."""
    shim = tool_path("ND_FSYNC_SHIM", ("tests", "libfsync_shim.so"))
    if not os.path.exists(shim):
        raise RuntimeError("fsync shim not built: %s" % shim)
    out = dict(env or {})
    out["LD_PRELOAD"] = shim
    if delay_file:
        out["ND_SHIM_DELAY_FILE"] = delay_file
    if fail_file:
        out["ND_SHIM_FAIL_FILE"] = fail_file
    asan = os.environ.get("ASAN_OPTIONS", "")
    out["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    return out


def _ephemeral_low():
    """The lowest port the kernel gives to outgoing connections and port-0
    binds (Linux: /proc/sys/net/ipv4/ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    """n distinct ports that are free now, chosen below the kernel's ephemeral
    range: a server that is stopped and started again on its port (a node
    restarted after kill -9, a NATS server brought back) finds it free even
    while tests in parallel open thousands of connections, whose local ports
    come from that range. All n are bound at once, so no two are equal."""
    low = _ephemeral_low()
    lo, hi = (10000, low - 1) if low > 12000 else (low + 1000, 65000)
    rnd = random.Random()
    socks = []
    try:
        for _ in range(200 * n):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((HOST, rnd.randint(lo, hi)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        check(len(socks) == n, "no %d free ports in %d..%d", n, lo, hi)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    """A port that is free now (free_ports()), for a test that cannot read
    the port from the log (logging off) or restarts a server on its port."""
    return free_ports(1)[0]


def request(conn, method, path, body=None, headers=None, close=True):
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        if close:
            conn.close()


def parse_json(data):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def parse_metrics(text):
    """Prometheus text -> {'name{labels}': value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


# -- the event feed --

def feed_events(srv, headers=None, limit=1000, query=""):
    """Every event of srv's GET /events, paged forwards limit at a time
    (query: more parameters, "&type=..."); bounded."""
    out, after = [], 0
    for _ in range(1000):
        status, page = srv.json("GET", "/events?after=%d&limit=%d%s" % (after, limit, query),
                                headers=headers)
        check(status == 200, "GET /events on %s: %s %r", srv.port, status, page)
        out += page["events"]
        if page["next_after"] == after:
            return out
        after = page["next_after"]
    raise AssertionError("the feed did not end")


# -- texts --

def load_texts():
    """The shipped test texts: {name: text}, names like zh1, en3."""
    texts = {}
    for name in sorted(os.listdir(TEXTS_DIR)):
        if name.endswith(".txt"):
            with open(os.path.join(TEXTS_DIR, name), encoding="utf-8") as f:
                texts[name[:-4]] = f.read()
    assert len(texts) >= 6, "tests/integration/texts/ is missing"
    return texts


def corpus_texts(limit, min_chars=800):
    """Extra real texts from ../shared/eval when it is there, else []."""
    path = os.path.join(SOURCE_ROOT, "..", "shared", "eval", "data", "corpus.jsonl.gz")
    out = []
    if not os.path.exists(path):
        return out
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if len(d["text"]) >= min_chars:
                out.append(d["text"])
                if len(out) >= limit:
                    break
    return out


def edit(text, n, seed):
    """A near duplicate: n single-character edits at positions from seed,
    replacing a character by its neighbour (keeps the script)."""
    chars = list(text)
    step = max(1, len(chars) // (n + 1))
    for i in range(n):
        pos = (step * (i + 1) + seed * 7) % (len(chars) - 1)
        chars[pos] = chars[pos + 1]
    return "".join(chars)


def distance(a_hex, b_hex):
    return bin(int(a_hex, 16) ^ int(b_hex, 16)).count("1")


# -- a tiny test runner: named tests, timings, a summary line, exit code --

class Runner:
    def __init__(self, name):
        self.name = name
        self.tests = []

    def test(self, fn):
        self.tests.append(fn)
        return fn

    def run(self, *args, fresh=None):
        """Runs every test with args, or, with fresh (a factory of context
        managers such as Server), each test with its own fresh(): tests then
        do not see each other's documents."""
        only = os.environ.get("ND_TEST_ONLY")
        passed = failed = 0
        t_all = time.monotonic()
        for fn in self.tests:
            if only and only not in fn.__name__:
                continue
            t0 = time.monotonic()
            try:
                if fresh is not None:
                    with fresh() as srv:
                        fn(srv)
                else:
                    fn(*args)
            except Exception:
                failed += 1
                print("FAIL %s (%.2fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
                traceback.print_exc()
            else:
                passed += 1
                print("ok   %s (%.2fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
        print("%s: %.1fs" % (self.name, time.monotonic() - t_all))
        print("%d passed, %d failed" % (passed, failed), flush=True)
        sys.exit(1 if failed else 0)


def check(cond, msg="", *fmt):
    if not cond:
        raise AssertionError(msg % fmt if fmt else msg)


def expect_error(status, body, want_status, code, field=None):
    check(status == want_status, "status %s, wanted %s: %r", status, want_status, body)
    check(isinstance(body, dict) and isinstance(body.get("error"), dict),
          "not a JSON error: %r", body)
    err = body["error"]
    check(err.get("code") == code, "code %r, wanted %r", err.get("code"), code)
    check(isinstance(err.get("message"), str) and err["message"], "no message: %r", err)
    if field is not None:
        check(err.get("field") == field, "field %r, wanted %r", err.get("field"), field)
    return err


def run_threads(n, fn, timeout=120):
    """Runs fn(i) on n threads; re-raises the first exception."""
    errors = []

    def wrap(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001 - collected and re-raised
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    check(not any(t.is_alive() for t in threads), "threads did not finish in %ss", timeout)
    if errors:
        raise errors[0]


# ---- client threads until stopped (test_haproxy, test_replicas, bench_replicas) ----

class ThreadGroup:
    """n daemon threads running self.run(k) (the subclass's) until self.stop
    is set: start(), then finish() sets it and waits (check: none hangs)."""

    def __init__(self, n):
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(k,), daemon=True)
                        for k in range(n)]

    def run(self, k):
        raise NotImplementedError

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self, timeout=30.0):
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        check(not any(t.is_alive() for t in self.threads), "%s threads hang",
              type(self).__name__)


# ---- HAProxy's admin socket (test_haproxy, cluster.py) ----

def haproxy_seconds(v):
    """HAProxy time ("500ms", "1s", "2") in seconds; bare numbers are ms."""
    m = re.match(r"^(\d+)(ms|s|m)?$", v)
    check(m, "cannot read HAProxy time %r", v)
    n = int(m.group(1))
    return {"ms": n / 1000.0, "s": float(n), "m": n * 60.0, None: n / 1000.0}[m.group(2)]


class HAProxyTimings:
    """Health-check timings of a backend of a shipped HAProxy file: its
    default-server line, else its first server line (HAProxy's defaults
    otherwise), and the file's timeout check. backend_lines: the backend's
    lines (comments stripped), or every line of a file with one backend."""

    def __init__(self, backend_lines, text):
        words = []
        for line in backend_lines:
            w = line.split()
            if w and w[0] == "default-server":
                words = w[1:]
                break
        if not words:
            for line in backend_lines:
                w = line.split()
                if w and w[0] == "server":
                    words = w[3:]
                    break
        opts = dict(zip(words, words[1:]))
        self.inter = haproxy_seconds(opts.get("inter", "2s"))
        self.fastinter = haproxy_seconds(opts.get("fastinter", opts.get("inter", "2s")))
        self.downinter = haproxy_seconds(opts.get("downinter", opts.get("inter", "2s")))
        self.fall = int(opts.get("fall", "3"))
        self.rise = int(opts.get("rise", "2"))
        tc = re.search(r"^\s*timeout check\s+(\S+)", text, re.M)
        self.check_timeout = haproxy_seconds(tc.group(1)) if tc else self.inter

    def down_within(self):
        """Longest time from /readyz turning 503 to the server marked DOWN."""
        return self.inter + (self.fall - 1) * self.fastinter + self.check_timeout

    def up_within(self):
        return self.downinter + (self.rise - 1) * self.fastinter + self.check_timeout


def haproxy_check(path, source=None):
    """haproxy -c on the file at path (made from source, when given)."""
    p = subprocess.run(["haproxy", "-c", "-f", path], capture_output=True, text=True,
                       timeout=30)
    check(p.returncode == 0, "haproxy -c -f %s%s failed:\n%s%s", path,
          " (from %s)" % source if source else "", p.stdout, p.stderr)


class HAProxyProcess:
    """haproxy in the foreground (-db) on a config file the subclass wrote:
    it sets self.cfg, self.sock (the admin socket the file names),
    self.log_path, self.backend (the checked backend) and self.src (the
    shipped file it came from, or None)."""

    proc = None
    _log = None
    src = None

    def start(self):
        """Checks the file, starts haproxy, waits for its admin socket."""
        haproxy_check(self.cfg, self.src)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        # Until the admin socket answers: its file can exist a moment before
        # HAProxy accepts on it (a connect then is refused: seen under load).
        deadline = time.monotonic() + 10
        while True:
            check(self.proc.poll() is None, "haproxy exited:\n%s", self.log_text())
            if os.path.exists(self.sock):
                try:
                    haproxy_command(self.sock, "show info")
                    return self
                except OSError:
                    pass
            check(time.monotonic() < deadline, "haproxy did not start:\n%s", self.log_text())
            time.sleep(0.02)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log:
            self._log.close()
            self._log = None

    def log_text(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def command(self, cmd):
        return haproxy_command(self.sock, cmd)

    def status(self, server):
        return haproxy_status(self.sock, self.backend, server)

    def wait_status(self, server, prefix, timeout):
        return haproxy_wait_status(self.sock, self.backend, server, prefix, timeout)


def haproxy_command(sock_path, cmd):
    """One command on HAProxy's stats socket; its whole answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(sock_path)
        s.sendall(cmd.encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return data.decode()


def haproxy_status(sock_path, backend, server):
    """The status of server in backend ("UP", "DOWN", "UP 1/2", ...)."""
    lines = haproxy_command(sock_path, "show stat").splitlines()
    head = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        row = dict(zip(head, line.split(",")))
        if row.get("pxname") == backend and row.get("svname") == server:
            return row["status"]
    raise AssertionError("no server %s in show stat" % server)


def haproxy_wait_status(sock_path, backend, server, prefix, timeout):
    """Seconds until the status of server starts with prefix (not in
    transition, "UP 1/2")."""
    t0 = time.monotonic()
    while True:
        st = haproxy_status(sock_path, backend, server)
        if st.startswith(prefix) and not re.match(r"^(UP|DOWN) \d+/\d+", st):
            return time.monotonic() - t0
        check(time.monotonic() - t0 < timeout, "haproxy: server %s still %r after %.1fs "
              "(wanted %s)", server, st, timeout, prefix)
        time.sleep(0.05)
