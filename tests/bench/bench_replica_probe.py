#!/usr/bin/env python3
"""/healthz latency with and without clients looping on GET /replica, on a
store of N documents.

    python3 tests/bench/bench_replica_probe.py [--n 1000000] [--build build]
                                               [--data DIR] [--clients 16]
                                               [--seconds 10] [--threads 2]

1. Fills a new data directory (under $ND_BENCH_DIR, default /tmp) with N
   records (build/tests/store_tool fill, as bench_restart.py does), or uses
   the store in --data DIR (kept). 10M records: about 30 s and 3.2 GB.
2. Starts neardupd on it (--no-access-log, --threads, no token: the
   default deployment, where /replica was open) and waits for /readyz.
3. Asks /healthz every 20 ms (a new connection each, as a probe does) for
   --seconds alone, then for --seconds while --clients clients (threads of
   another process) loop on GET /replica over keep-alive connections.
   Prints p50 / p99 / max of /healthz in both phases, and the /replica
   requests answered and their mean latency.

The last line:
    replica_probe: N=<n> idle_p99_ms=<..> loaded_p99_ms=<..> replica_rps=<..>
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_main(port, clients, seconds):
    """Run as a separate process: clients threads loop on GET /replica."""
    until = time.monotonic() + seconds
    stats = {"ok": 0, "err": 0, "sum_s": 0.0, "max_s": 0.0}
    lock = threading.Lock()

    def loop():
        conn = None
        while time.monotonic() < until:
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                conn.request("GET", "/replica")
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok, conn = False, None
            dt = time.monotonic() - t0
            with lock:
                stats["ok" if ok else "err"] += 1
                stats["sum_s"] += dt
                stats["max_s"] = max(stats["max_s"], dt)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 600)
    print(json.dumps(stats), flush=True)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def get(port, path, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def probe(port, seconds):
    lat = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            status, _ = get(port, "/healthz")
        except OSError:
            status = None
        lat.append((time.monotonic() - t0) * 1000.0)
        if status != 200:
            print("  /healthz answered %s" % status)
        time.sleep(0.02)
    return lat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    tmp = None
    data = a.data
    if not data:
        tmp = tempfile.mkdtemp(prefix="nd-bench-replica-", dir=os.environ.get("ND_BENCH_DIR"))
        data = os.path.join(tmp, "data")
        t0 = time.monotonic()
        subprocess.run([os.path.join(a.build, "tests", "store_tool"), "fill", data, str(a.n)],
                       check=True, stdout=subprocess.DEVNULL)
        print("filled %d records in %.1f s" % (a.n, time.monotonic() - t0))
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([os.path.join(a.build, "server", "neardupd"), "--listen",
                             "127.0.0.1:0", "--data", data, "--threads", str(a.threads),
                             "--no-access-log", "--no-sync"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = None
        t0 = time.monotonic()
        while port is None:
            if proc.poll() is not None or time.monotonic() - t0 > 600:
                log.seek(0)
                sys.exit("neardupd did not start:\n" + log.read().decode(errors="replace"))
            log.seek(0)
            for line in log.read().decode(errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("msg") == "listening":
                    port = rec["port"]
            time.sleep(0.05)
        while True:
            try:
                if get(port, "/readyz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - t0 > 600:
                sys.exit("neardupd not ready within 600 s")
            time.sleep(0.05)
        print("ready in %.1f s" % (time.monotonic() - t0))
        t1 = time.monotonic()
        status, body = get(port, "/replica", timeout=600)
        print("one GET /replica: %d in %.1f ms: %s" % (status, (time.monotonic() - t1) * 1000,
                                                        body.decode(errors="replace")))
        idle = probe(port, a.seconds)
        load = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--load", str(port),
                                 str(a.clients), str(a.seconds + 1.0)],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        loaded = probe(port, a.seconds)
        out, _ = load.communicate(timeout=a.seconds + 700)
        st = json.loads(out.strip().splitlines()[-1])
        n_rep = st["ok"] + st["err"]
        for name, lat in (("alone", idle), ("with /replica load", loaded)):
            print("/healthz %-20s %4d probes  p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms"
                  % (name, len(lat), percentile(lat, 50), percentile(lat, 99), max(lat)))
        print("/replica: %d clients, %d answered 200, %d failed, %.0f/s, mean %.2f ms, max %.1f ms"
              % (a.clients, st["ok"], st["err"], st["ok"] / (a.seconds + 1.0),
                 1000.0 * st["sum_s"] / max(1, n_rep), 1000.0 * st["max_s"]))
        print("replica_probe: N=%s idle_p99_ms=%.1f loaded_p99_ms=%.1f replica_rps=%.0f"
              % (json.loads(body).get("documents"), percentile(idle, 99),
                 percentile(loaded, 99), st["ok"] / (a.seconds + 1.0)))
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        sys.exit(0)
    main()
