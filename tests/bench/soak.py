#!/usr/bin/env python3
"""Soak test: neardupd under a steady mixed load for a long time; nothing may
grow without bound.

1. Starts neardupd (durable store in a temporary directory, unless --url).
2. Measures capacity: --measure seconds (20) at full speed, closed loop.
3. Runs --minutes (10) at --load (80 %) of that capacity, paced, with the mix
   below, and prints each minute: requests, rate, errors, p50 / p99 / max
   latency, the server's RSS (/proc/<pid>/status), open descriptors and
   documents held.
4. Ends with a verdict: RSS of the first and last minute, the growth over
   the second half, p99 per minute. Exit status 1 if a request failed (5xx,
   connection error) or the RSS of the second half grew by more than
   --max-growth percent (5).

Mix (per request): 40 % POST /fingerprint, 25 % POST /check-original
without registering, 15 % with register: true (distinct articles: original,
registered; edited ones: duplicates), 10 % GET /documents/{id}, 10 % DELETE
of the oldest document this client registered. Each client keeps at most
--keep (300) of its documents, so the registry holds a bounded number.

Texts: ../shared/eval/data/corpus.jsonl.gz when present, else the test
texts with shuffled sentences. Standard library only; the clients are
processes, each with --conns (32) keep-alive connections on a selector;
latency counts from the request's scheduled time (waiting for a free
connection included). Client and server share the machine:
the capacity measured is that of the pair, and 80 % of it leaves the server
headroom either way. Not part of CI (it takes minutes).

    python3 tests/bench/soak.py [--minutes 10] [--load 0.8] [--clients 2] [--conns 32]
        [--threads 2] [--neardupd build/server/neardupd] [--no-sync]
"""

import argparse
import gzip
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# ---- texts ----

def load_texts(limit):
    path = os.path.join(ROOT, "..", "shared", "eval", "data", "corpus.jsonl.gz")
    texts = []
    if os.path.exists(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                t = json.loads(line)["text"]
                if 600 <= len(t) <= 8000:
                    texts.append(t)
                if len(texts) >= limit:
                    break
    if len(texts) < 50:
        base = []
        tdir = os.path.join(ROOT, "tests", "integration", "texts")
        for name in sorted(os.listdir(tdir)):
            if name.endswith(".txt"):
                with open(os.path.join(tdir, name), encoding="utf-8") as f:
                    base.append(f.read())
        rnd = random.Random(1)
        while len(texts) < limit:
            parts = re.split(r"(?<=[.!?。！？])\s*", rnd.choice(base))
            rnd.shuffle(parts)
            texts.append(" ".join(parts))
    return texts


def edit(text, rnd):
    chars = list(text)
    for _ in range(3):
        i = rnd.randrange(len(chars) - 1)
        chars[i] = chars[i + 1]
    return "".join(chars)


# ---- a minimal keep-alive HTTP client, many connections per process ----

def parse_response(buf, method):
    """(status, bytes used, close) when buf starts with a whole response,
    else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    close = False
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"connection" and v.strip().lower() == b"close":
            close = True
    if method == "HEAD":
        length = 0
    if len(buf) < end + 4 + length:
        return None
    return status, end + 4 + length, close


class Conn:
    def __init__(self, addr):
        self.addr = addr
        self.sock = None
        self.buf = b""
        self.busy = None  # (op, method, scheduled time) while a request is out

    def send(self, op, method, path, body, when):
        if self.sock is None:
            self.sock = socket.create_connection(self.addr, timeout=30)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buf = b""
        head = "%s %s HTTP/1.1\r\nHost: soak\r\n" % (method, path)
        if body is not None:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self.sock.sendall(head.encode() + b"\r\n" + (body or b""))
        self.busy = (op, method, when)

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None
        self.busy = None


# ---- clients ----

OPS = [("fingerprint", 40), ("check", 25), ("register", 15), ("get", 10), ("delete", 10)]


class Mix:
    """Draws the next request of the mix for one client process."""

    def __init__(self, idx, texts, keep):
        self.rnd = random.Random(idx * 7919 + int(time.time()))
        self.idx, self.texts, self.keep = idx, texts, keep
        self.mine = []  # ids registered (or tried), oldest first
        self.seq = 0
        self.names = [n for n, _ in OPS]
        self.weights = [w for _, w in OPS]

    def next(self):
        rnd = self.rnd
        op = rnd.choices(self.names, self.weights)[0]
        if op == "register" and len(self.mine) >= self.keep:
            op = "delete"
        if op in ("get", "delete") and not self.mine:
            op = "check"
        text = rnd.choice(self.texts)
        if op == "fingerprint":
            return op, "POST", "/fingerprint", json.dumps({"text": text}).encode()
        if op == "check":
            return op, "POST", "/check-original", json.dumps({"text": edit(text, rnd)}).encode()
        if op == "register":
            self.seq += 1
            doc = "soak-%d-%d-%d" % (os.getpid(), self.idx, self.seq)
            t = text if rnd.random() < 0.5 else edit(text, rnd)
            body = {"id": doc, "text": t + "\n\n" + doc, "register": True,
                    "meta": {"client": self.idx, "seq": self.seq}}
            self.mine.append(doc)
            return op, "POST", "/check-original", json.dumps(body).encode()
        if op == "get":
            return op, "GET", "/documents/" + rnd.choice(self.mine), None
        return op, "DELETE", "/documents/" + self.mine.pop(0), None


def client(idx, addr, nconns, texts, rate, stop_at, keep, out):
    """One process with nconns connections, until stop_at. rate 0: every
    connection always busy (closed loop); else requests are scheduled at
    rate per second (Poisson) and latency counts from the scheduled time, so
    waiting for a free connection counts too. Reports (latencies, counts)
    to out once a second."""
    import selectors
    mix = Mix(idx, texts, keep)
    sel = selectors.DefaultSelector()
    conns = [Conn(addr) for _ in range(nconns)]
    idle = list(conns)
    pending = []  # scheduled times waiting for a free connection
    lat, counts = [], {}
    next_send = time.monotonic()
    last_flush = next_send

    def count(key, t_sched):
        counts[key] = counts.get(key, 0) + 1
        lat.append(time.monotonic() - t_sched)

    def issue(c, when):
        op, method, path, body = mix.next()
        try:
            registered = c.sock is not None
            c.send(op, method, path, body, when)
            if not registered:
                sel.register(c.sock, selectors.EVENT_READ, c)
        except OSError as e:
            drop(c)
            count("%s conn:%s" % (op, type(e).__name__), when)
            idle.append(c)

    def drop(c):
        if c.sock is not None:
            try:
                sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        c.close()

    while True:
        now = time.monotonic()
        if now >= stop_at:
            break
        if rate:
            while next_send <= now:
                pending.append(next_send)
                next_send += mix.rnd.expovariate(rate)
            if pending and now - pending[0] > 5:  # far behind: drop the backlog
                pending = pending[-len(conns):]
        while idle and (pending or not rate):
            issue(idle.pop(), pending.pop(0) if rate else time.monotonic())
        timeout = max(0.0, min(next_send - time.monotonic(), 0.2)) if rate else 0.2
        for key, _ in sel.select(timeout):
            c = key.data
            try:
                chunk = c.sock.recv(65536)
            except OSError:
                chunk = b""
            op, method, when = c.busy
            if not chunk:
                drop(c)
                count("%s conn:closed" % op, when)
                idle.append(c)
                continue
            c.buf += chunk
            parsed = parse_response(c.buf, method)
            if parsed:
                status, used, close = parsed
                c.buf = c.buf[used:]
                count("%s %d" % (op, status), when)
                c.busy = None
                if close:
                    drop(c)
                idle.append(c)
        if time.monotonic() - last_flush >= 1.0:
            out.put((lat, counts))
            lat, counts = [], {}
            last_flush = time.monotonic()
    out.put((lat, counts))
    for c in conns:
        drop(c)


def run_load(args, port, texts, seconds, total_rate, on_second):
    """Runs the clients for seconds; calls on_second(latencies, counts) as
    their reports arrive. Returns when all clients are done."""
    out = mp.Queue()
    stop_at = time.monotonic() + seconds
    per = total_rate / args.clients if total_rate else 0
    procs = [mp.Process(target=client, args=(i, ("127.0.0.1", port), args.conns, texts, per,
                                             stop_at, args.keep, out), daemon=True)
             for i in range(args.clients)]
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs) or not out.empty():
        try:
            lat, counts = out.get(timeout=0.5)
        except Exception:  # queue.Empty
            continue
        on_second(lat, counts)
    for p in procs:
        p.join()


# ---- the server ----

def rss_kb(pid, field="VmRSS"):
    """VmRSS (or RssAnon: heap and stacks, without the store's mapped file)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def documents(port):
    data = b""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
    except OSError:
        return -1
    m = re.search(rb"\nneardup_documents (\S+)", data)
    return int(float(m.group(1))) if m else -1


def start_server(args):
    binary = args.neardupd or os.environ.get("NEARDUPD") or os.path.join(
        ROOT, "build", "server", "neardupd")
    tmp = tempfile.mkdtemp(prefix="neardup-soak-")
    log = open(os.path.join(tmp, "neardupd.log"), "wb")
    cmd = [binary, "--listen", "127.0.0.1:0", "--threads", str(args.threads),
           "--data", os.path.join(tmp, "data"), "--no-access-log"]
    if args.no_sync:
        cmd.append("--no-sync")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    port = None
    deadline = time.monotonic() + 30
    while port is None and time.monotonic() < deadline:
        time.sleep(0.05)
        with open(log.name, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening":
                    port = rec["port"]
        if proc.poll() is not None:
            break
    if port is None:
        proc.kill()
        sys.exit("neardupd did not start: see %s" % log.name)
    return proc, port, tmp


def pct(sorted_lat, q):
    if not sorted_lat:
        return float("nan")
    return sorted_lat[min(len(sorted_lat) - 1, int(len(sorted_lat) * q))]


def is_error(key):
    status = key.split(" ", 1)[1]
    return status.startswith("conn:") or status.startswith("5")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--load", type=float, default=0.8, help="fraction of the measured capacity")
    ap.add_argument("--measure", type=float, default=20, help="seconds of the capacity run")
    ap.add_argument("--clients", type=int, default=2, help="client processes")
    ap.add_argument("--conns", type=int, default=32, help="connections per client process")
    ap.add_argument("--threads", type=int, default=2, help="neardupd worker threads")
    ap.add_argument("--keep", type=int, default=300, help="documents each client keeps")
    ap.add_argument("--texts", type=int, default=3000)
    ap.add_argument("--neardupd", help="the binary (default: $NEARDUPD or build/server/neardupd)")
    ap.add_argument("--no-sync", action="store_true", help="run neardupd with --no-sync")
    ap.add_argument("--max-growth", type=float, default=5.0,
                    help="allowed RSS growth over the second half, percent")
    args = ap.parse_args()

    texts = load_texts(args.texts)
    proc, port, tmp = start_server(args)
    print("neardupd pid %d on port %d, %d threads, %s; %d texts; %d client processes x %d "
          "connections" % (proc.pid, port, args.threads, "no-sync" if args.no_sync else "fsync",
                           len(texts), args.clients, args.conns), flush=True)
    try:
        # Warm up, then measure capacity at full speed.
        run_load(args, port, texts, 3, 0, lambda lat, c: None)
        total = {"n": 0, "lat": []}

        def collect(lat, counts):
            total["n"] += len(lat)
            total["lat"] += lat

        t0 = time.monotonic()
        run_load(args, port, texts, args.measure, 0, collect)
        secs = time.monotonic() - t0
        capacity = total["n"] / secs
        lat = sorted(total["lat"])
        print("capacity: %.0f req/s over %.0f s at full speed (p50 %.2f ms, p99 %.2f ms)" % (
            capacity, secs, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3), flush=True)
        rate = capacity * args.load
        print("soak: %.0f minutes at %.0f req/s (%.0f %% of capacity)\n" % (
            args.minutes, rate, args.load * 100), flush=True)
        print("%6s %9s %8s %7s %9s %9s %9s %10s %8s %6s %6s" % (
            "minute", "requests", "req/s", "errors", "p50 ms", "p99 ms", "max ms", "RSS KB",
            "anon KB", "fds", "docs"), flush=True)

        minute = {"lat": [], "counts": {}, "start": time.monotonic(), "i": 0}
        rows = []
        all_counts = {}

        def report():
            lat = sorted(minute["lat"])
            errors = sum(v for k, v in minute["counts"].items() if is_error(k))
            dur = time.monotonic() - minute["start"]
            row = {"minute": minute["i"] + 1, "requests": len(lat), "rate": len(lat) / dur,
                   "errors": errors, "p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3,
                   "max": (lat[-1] if lat else 0) * 1e3, "rss": rss_kb(proc.pid),
                   "anon": rss_kb(proc.pid, "RssAnon"),
                   "fds": open_fds(proc.pid), "docs": documents(port)}
            rows.append(row)
            print("%(minute)6d %(requests)9d %(rate)8.0f %(errors)7d %(p50)9.2f %(p99)9.2f "
                  "%(max)9.1f %(rss)10d %(anon)8d %(fds)6d %(docs)6d" % row, flush=True)
            minute.update(lat=[], counts={}, start=time.monotonic(), i=minute["i"] + 1)

        def per_second(lat, counts):
            minute["lat"] += lat
            for k, v in counts.items():
                minute["counts"][k] = minute["counts"].get(k, 0) + v
                all_counts[k] = all_counts.get(k, 0) + v
            if time.monotonic() - minute["start"] >= 60:
                report()

        run_load(args, port, texts, args.minutes * 60, rate, per_second)
        if minute["lat"] and time.monotonic() - minute["start"] > 10:
            report()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "killed"
        shutil.rmtree(tmp, ignore_errors=True)

    print("\nanswers: " + ", ".join("%s: %d" % kv for kv in sorted(all_counts.items())))
    print("neardupd exit status at SIGTERM: %s" % code)
    if len(rows) < 2:
        sys.exit("too short to judge")
    half = rows[len(rows) // 2:]
    growth = (half[-1]["rss"] - half[0]["rss"]) * 100.0 / max(1, half[0]["rss"])
    errors = sum(r["errors"] for r in rows)
    print("RSS first minute %d KB, last minute %d KB; second half %+.1f %% "
          "(anonymous %d -> %d KB)" % (rows[0]["rss"], rows[-1]["rss"], growth,
                                      rows[0]["anon"], rows[-1]["anon"]))
    print("p99 per minute (ms): " + ", ".join("%.1f" % r["p99"] for r in rows))
    ok = errors == 0 and growth <= args.max_growth and code == 0
    print("verdict: %s (%d failed requests)" % ("PASS" if ok else "FAIL", errors))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
