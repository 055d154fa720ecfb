#!/usr/bin/env python3
"""Soak under attack: neardupd with a durable store serves normal
clients for --minutes (10) while two kinds of attackers run alongside:

- meta amplification: bodies of --max-body (4 MiB) whose "meta"
  is nested empty objects, as queries and as registrations without a
  token, one after the other from --meta-attackers processes;
- clients that never read: --unread connections that pipeline
  k=8 queries into a dense cluster (150 documents of one text with 16 KiB
  of meta each, written by store_tool: answers of about 1.65 MB) and never
  read; a connection the server closes is opened again.

Normal clients (one process, --clients threads, paced): /fingerprint,
/check-original with and without registering (a bearer token), GET
/documents/{id}. A prober process asks GET /healthz on a new connection
every 50 ms.

Each minute it prints: /healthz probes, p50 / p99 / max; normal requests
and failures; attacker requests answered; the server's RSS and peak RSS
(VmHWM). At the end, the verdict: /healthz p99 over the whole run and the
worst minute (limit --p99-ms, 250), no normal request failed (a 503
"overloaded" or a refused attack is not a failure; a normal client's
connection error or 5xx is), and the peak RSS growth over the RSS after
set-up within --max-growth-mb (200: 32 MiB of unwritten answers and their
allocation overhead, as measured by test_unread, plus the attackers'
bodies in flight, see README "Limits"). Exit 1 if any fails.

Not part of CI (it takes minutes); a benchmark on a shared machine: the
clients run on the same two cores as the server.

    python3 tests/bench/soak_attack.py [--minutes 10] [--neardupd build/server/neardupd]
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKEN = "soak-attack-token-5b0e7c2d9a41f386"
HOST = "127.0.0.1"


def texts():
    out = {}
    tdir = os.path.join(ROOT, "tests", "integration", "texts")
    for name in sorted(os.listdir(tdir)):
        if name.endswith(".txt"):
            with open(os.path.join(tdir, name), encoding="utf-8") as f:
                out[name[:-4]] = f.read()
    return out


def rss_kb(pid, key="VmRSS:"):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def http(port, method, path, body=None, headers=None, timeout=30):
    """One request on a new connection: (status, body bytes)."""
    import http.client
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


# ---- processes ----

def prober(port, stop_at, out):
    with open(out, "w") as f:
        while time.time() < stop_at:
            t0 = time.monotonic()
            try:
                st, _ = http(port, "GET", "/healthz", timeout=10)
            except OSError as e:
                st = "error %r" % e
            f.write(json.dumps({"t": time.time(), "lat": time.monotonic() - t0, "st": st}) + "\n")
            f.flush()
            time.sleep(max(0, 0.05 - (time.monotonic() - t0)))


def normal_clients(port, stop_at, out, nthreads, rate):
    import http.client
    tx = list(texts().values())
    lock = threading.Lock()
    f = open(out, "w")

    def run(i):
        rnd = random.Random(i)
        conn = None
        n = 0
        mine = []
        while time.time() < stop_at:
            if conn is None:
                conn = http.client.HTTPConnection(HOST, port, timeout=30)
            kind = rnd.random()
            hdrs = {"Content-Type": "application/json"}
            base = tx[rnd.randrange(len(tx))]
            if kind < 0.4:
                method, path, body = "POST", "/fingerprint", {"text": base[:400]}
            elif kind < 0.65:
                method, path, body = "POST", "/check-original", {"text": base}
            elif kind < 0.85:
                doc = "soak-%d-%d" % (i, n)
                txt = "%s\n%s %d %d" % (base, "x" * (n % 50), i, n)
                method, path, body = "POST", "/check-original", {
                    "id": doc, "text": txt, "register": True, "meta": {"n": n}}
                hdrs["Authorization"] = "Bearer " + TOKEN
                mine.append(doc)
            else:
                doc = mine[-1] if mine else "none"
                method, path, body = "GET", "/documents/" + doc, None
                hdrs = {}
            t0 = time.monotonic()
            try:
                conn.request(method, path, body=None if body is None else json.dumps(body),
                             headers=hdrs)
                r = conn.getresponse()
                r.read()
                st = r.status
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                st = "error %r" % e
                conn.close()
                conn = None
            with lock:
                f.write(json.dumps({"t": time.time(), "lat": time.monotonic() - t0, "st": st,
                                    "path": path}) + "\n")
                f.flush()
            n += 1
            time.sleep(max(0, nthreads / rate - (time.monotonic() - t0)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    f.close()


def meta_attacker(port, stop_at, out, size, idx):
    """4 MiB bodies of nested empty objects in meta, as a query and as a
    registration without the token, back to back."""
    inner = b"{}," * ((size - 200) // 3)
    with open(out, "w") as f:
        n = 0
        while time.time() < stop_at:
            register = n % 2 == 1
            body = (b'{"id": "atk-%d-%d", "text": "x y z", "register": %s, "meta": {"a": [%s{}]}}'
                    % (idx, n, b"true" if register else b"false", inner))
            t0 = time.monotonic()
            try:
                st, _ = http(port, "POST", "/check-original", body,
                             {"Content-Type": "application/json"}, timeout=60)
            except OSError as e:
                st = "error %r" % e
            f.write(json.dumps({"t": time.time(), "lat": time.monotonic() - t0, "st": st}) + "\n")
            f.flush()
            n += 1
            time.sleep(0.2)


def unread_attacker(port, stop_at, out, nconns, query_text):
    body = json.dumps({"text": query_text, "k": 8}).encode()
    req = (b"POST /check-original HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body)) * 4
    socks = []
    opened = closed = 0
    with open(out, "w") as f:
        last = time.time()
        while time.time() < stop_at:
            while len(socks) < nconns:
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                try:
                    s.connect((HOST, port))
                    s.setblocking(False)
                    s.send(req)
                except OSError:
                    s.close()
                    break
                socks.append(s)
                opened += 1
            time.sleep(0.5)
            alive = []
            for s in socks:  # one the server closed is replaced (seen without reading)
                try:
                    state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
                except OSError:
                    state = 7
                if state in (7, 8):  # TCP_CLOSE, TCP_CLOSE_WAIT
                    s.close()
                    closed += 1
                else:
                    alive.append(s)
            socks = alive
            if time.time() - last >= 5:
                f.write(json.dumps({"t": time.time(), "opened": opened, "closed": closed}) + "\n")
                f.flush()
                last = time.time()
    for s in socks:
        s.close()


# ---- set-up and report ----

def make_cluster(store_tool, neardup, data, text, n=150):
    h = subprocess.run([neardup, "fingerprint"], input=text.encode(), capture_output=True,
                       check=True).stdout.decode().strip()
    t0 = int(time.time() * 1e6) - 10 ** 9
    lines = "".join(json.dumps({"id": "dense-%d" % i, "simhash": h, "registered_at_us": t0 + i,
                                "chars": len(text), "text": text,
                                "meta": {"note": "m" * 16000}}) + "\n" for i in range(n))
    subprocess.run([store_tool, "put", data], input=lines.encode(), check=True,
                   capture_output=True)


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--neardupd", default=os.path.join(ROOT, "build", "server", "neardupd"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=150, help="normal requests/s, all clients")
    ap.add_argument("--meta-attackers", type=int, default=2)
    ap.add_argument("--unread", type=int, default=100)
    ap.add_argument("--p99-ms", type=float, default=250)
    ap.add_argument("--max-growth-mb", type=float, default=200)
    args = ap.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.neardupd)))
    neardup = os.path.join(build, "server", "neardup")
    store_tool = os.path.join(build, "tests", "store_tool")
    tmp = tempfile.mkdtemp(prefix="neardup-soak-attack-")
    data = os.path.join(tmp, "data")
    tx = texts()
    make_cluster(store_tool, neardup, data, tx["en1"])
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(TOKEN)
    os.chmod(token, 0o600)
    log = open(os.path.join(tmp, "neardupd.log"), "wb")
    proc = subprocess.Popen([args.neardupd, "--listen", "127.0.0.1:0", "--data", data,
                             "--threads", str(args.threads), "--token-file", token,
                             "--no-access-log"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = None
        deadline = time.time() + 60
        while port is None and time.time() < deadline:
            for line in open(log.name, "rb").read().decode().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening":
                    port = rec["port"]
            time.sleep(0.05)
        while time.time() < deadline:
            try:
                if http(port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        st, body = http(port, "POST", "/check-original", json.dumps({"text": tx["en1"], "k": 8}),
                        {"Content-Type": "application/json"})
        print("neardupd pid %d, port %d; one k=8 answer into the cluster: %d, %.2f MB"
              % (proc.pid, port, st, len(body) / 1e6), flush=True)
        time.sleep(1)
        rss0 = rss_kb(proc.pid)
        print("RSS after set-up: %.1f MB" % (rss0 / 1024), flush=True)
        t_start = time.time()
        stop_at = t_start + args.minutes * 60
        files = {k: os.path.join(tmp, k + ".jsonl") for k in ("probe", "normal", "unread")}
        procs = [mp.Process(target=prober, args=(port, stop_at, files["probe"])),
                 mp.Process(target=normal_clients, args=(port, stop_at, files["normal"],
                                                         args.clients, args.rate)),
                 mp.Process(target=unread_attacker, args=(port, stop_at, files["unread"],
                                                          args.unread, tx["en1"]))]
        for i in range(args.meta_attackers):
            files["meta%d" % i] = os.path.join(tmp, "meta%d.jsonl" % i)
            procs.append(mp.Process(target=meta_attacker, args=(
                port, stop_at, files["meta%d" % i], (4 << 20) - 4096, i)))
        for p in procs:
            p.start()
        minute = 0
        peak = 0
        worst_p99 = 0.0
        while time.time() < stop_at + 1:
            next_t = t_start + (minute + 1) * 60
            while time.time() < min(next_t, stop_at + 0.5):
                peak = max(peak, rss_kb(proc.pid))
                time.sleep(0.2)
            lo, hi = t_start + minute * 60, min(next_t, stop_at)
            probes = [r for r in read_jsonl(files["probe"]) if lo <= r["t"] < hi]
            normal = [r for r in read_jsonl(files["normal"]) if lo <= r["t"] < hi]
            metas = [r for k, path in files.items() if k.startswith("meta")
                     for r in read_jsonl(path) if lo <= r["t"] < hi]
            lat = [r["lat"] for r in probes]
            bad = [r for r in normal if not isinstance(r["st"], int) or
                   (r["st"] >= 500 and r["st"] != 503)]
            over = sum(1 for r in normal if r["st"] == 503)
            unread = read_jsonl(files["unread"])
            p99 = pct(lat, 0.99)
            worst_p99 = max(worst_p99, p99)
            print("minute %2d: healthz %4d probes p50 %6.1f p99 %6.1f max %7.1f ms | normal %5d "
                  "(%d failed, %d 503) | meta attacks %3d | unread conns opened %s closed %s | "
                  "RSS %.0f MB, peak %.0f MB"
                  % (minute + 1, len(lat), pct(lat, 0.5) * 1e3, p99 * 1e3,
                     (max(lat) if lat else 0) * 1e3, len(normal), len(bad), over, len(metas),
                     unread[-1]["opened"] if unread else "-",
                     unread[-1]["closed"] if unread else "-",
                     rss_kb(proc.pid) / 1024, rss_kb(proc.pid, "VmHWM:") / 1024), flush=True)
            minute += 1
            if hi >= stop_at:
                break
        for p in procs:
            p.join(120)
        probes = read_jsonl(files["probe"])
        lat = [r["lat"] for r in probes]
        failed_probes = [r for r in probes if r["st"] != 200]
        normal = read_jsonl(files["normal"])
        bad = [r for r in normal if not isinstance(r["st"], int) or
               (r["st"] >= 500 and r["st"] != 503)]
        hwm = rss_kb(proc.pid, "VmHWM:")
        growth = (hwm - rss0) / 1024
        p99 = pct(lat, 0.99)
        print("verdict: healthz p99 %.1f ms over %d probes (worst minute %.1f ms; limit %.0f), "
              "%d probes failed; %d normal requests, %d failed; peak RSS %.0f MB = %.0f MB over "
              "the set-up's %.0f MB (limit %.0f)"
              % (p99 * 1e3, len(lat), worst_p99 * 1e3, args.p99_ms, len(failed_probes),
                 len(normal), len(bad), hwm / 1024, growth, rss0 / 1024, args.max_growth_mb),
              flush=True)
        ok = (p99 * 1e3 <= args.p99_ms and not failed_probes and not bad and
              growth <= args.max_growth_mb)
        if bad:
            print("failed normal requests, first: %r" % bad[:3])
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
