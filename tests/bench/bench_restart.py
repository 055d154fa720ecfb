#!/usr/bin/env python3
"""Restart time: how long neardupd takes from exec to /readyz 200 on a store
of N registered documents.

    python3 tests/bench/bench_restart.py [--n 1000000] [--build build]
                                         [--data DIR] [--keep] [--runs 1]
                                         [--old-build DIR --old-data DIR] [--warmup 1]

1. Fills a new data directory (under $ND_BENCH_DIR, default /tmp) with N
   records through nd_store_put at full speed, no fsync (build/tests/
   store_tool fill): realistic ids and meta, random fingerprints of the
   current version. With --data DIR an existing store is used instead (and
   kept); --keep keeps the one made here.
2. Starts the real neardupd on it (--no-access-log, 2 worker threads),
   cold (data.mdb evicted from the page cache with posix_fadvise DONTNEED,
   as after a reboot) and then warm (as after a crash and restart), each
   --runs times. Times exec -> /readyz 200, polling every 5 ms, and reads
   its log: the "loading documents" progress lines (loaded / total, rate)
   and the "ready" line. Also RSS at ready and the time SIGTERM takes.

The last line is the cold run:
    restart: N=<n> ready_s=<seconds> rate=<docs/s> (cold|warm)

With --old-build (another build, e.g. of an older commit in a git worktree)
and --old-data (a store that build reads: its own store_tool fills one when
the record layouts differ), each run of this build is paired with a run of
the old one right after it, same mode, and the old's figures and the ratio
new/old are printed too (the machine is shared: compare within a pair).
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def readyz(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def rss_mb(pid):
    """(anonymous, file-backed) resident MB: the store's map is file-backed."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out.get("RssAnon", 0.0), out.get("RssFile", 0.0)


def cpu_s(pid):
    """User and system CPU seconds of the process so far (all threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def records(path):
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_once(neardupd, data, n, cold, tmp, label=""):
    if cold:
        evict(os.path.join(data, "data.mdb"))
    log = os.path.join(tmp, "neardupd-%d.log" % time.monotonic_ns())
    with open(log, "wb") as lf:
        t0 = time.monotonic()
        proc = subprocess.Popen([neardupd, "--data", data, "--listen", "127.0.0.1:0",
                                 "--threads", "2", "--no-access-log"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=lf)
    try:
        port = None
        while True:
            if proc.poll() is not None:
                sys.exit("neardupd exited:\n" + open(log).read())
            if port is None:
                for r in records(log):
                    if r.get("msg") == "listening":
                        port = r["port"]
                        t_listen = time.monotonic() - t0
            elif readyz(port) == 200:
                break
            time.sleep(0.005)
        ready_s = time.monotonic() - t0
        rss = rss_mb(proc.pid)
        user, sys_ = cpu_s(proc.pid)
        t1 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=600)
        stop_s = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recs = records(log)
    progress = [r for r in recs if r.get("msg") == "loading documents"]
    ready = [r for r in recs if r.get("msg") == "ready"]
    if not ready or ready[-1]["documents"] != n or code != 0:
        sys.exit("unexpected end (exit %s):\n%s" % (code, open(log).read()[-3000:]))
    os.unlink(log)
    mode = label + ("cold" if cold else "warm")
    for p in progress:
        print("  %s progress: loaded %d / %d, rate %d docs/s" % (mode, p["loaded"], p["total"],
                                                                  p["rate"]))
    rate = n / ready_s
    print("%s: listening after %.3f s, ready after %.2f s (log says %.3f s), %.0f docs/s; "
          "CPU %.2f s user + %.2f s sys; RSS anon %.0f MB (%.0f B/doc) + file %.0f MB; "
          "SIGTERM to exit %.2f s"
          % (mode, t_listen, ready_s, ready[-1]["seconds"], rate, user, sys_, rss[0],
             rss[0] * 1048576 / n, rss[1], stop_s), flush=True)
    return ready_s, rate, rss[0] * 1048576 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--data", help="use this existing store (not filled, not removed)")
    ap.add_argument("--keep", action="store_true", help="keep the store made here")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--old-build", help="pair every run with this build's neardupd")
    ap.add_argument("--old-data", help="the store the old build loads (N records)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="starts run first and not counted (default 1): on these VMs the first "
                         "touch of memory the guest has not used lately is slow, so the first "
                         "run of a session pays for pages the later ones get at once "
                         "(proto/scale.md, 'Fresh pages'); with --old-build, each warm-up "
                         "runs the old build, then this one")
    args = ap.parse_args()
    if bool(args.old_build) != bool(args.old_data):
        sys.exit("--old-build and --old-data go together")
    neardupd = os.path.join(args.build, "server", "neardupd")
    tool = os.path.join(args.build, "tests", "store_tool")
    tmp = tempfile.mkdtemp(prefix="bench-restart-", dir=os.environ.get("ND_BENCH_DIR"))
    data = args.data
    try:
        if data is None:
            data = os.path.join(tmp, "data")
            print("filling %s with %d records ..." % (data, args.n), flush=True)
            subprocess.run([tool, "fill", data, str(args.n)], check=True)
        size = os.path.getsize(os.path.join(data, "data.mdb"))
        print("data.mdb: %.0f MB (%.0f B/record)" % (size / 1048576, size / args.n), flush=True)
        results = []
        old = os.path.join(args.old_build, "server", "neardupd") if args.old_build else None
        for _ in range(args.warmup):
            if old:
                run_once(old, args.old_data, args.n, False, tmp, "warm-up old ")
            run_once(neardupd, data, args.n, False, tmp, "warm-up ")
        for cold in (False, True):
            for _ in range(args.runs):
                new_r = run_once(neardupd, data, args.n, cold, tmp)
                results.append((new_r[:2], cold))
                if old:
                    old_r = run_once(old, args.old_data, args.n, cold, tmp, "old ")
                    print("pair %s: new %.2f s / old %.2f s = %.2fx; RSS anon new - old %+.0f B/doc"
                          % ("cold" if cold else "warm", new_r[0], old_r[0], new_r[0] / old_r[0],
                             new_r[2] - old_r[2]), flush=True)
        (ready_s, rate), cold = min((r for r in results if r[1]), key=lambda r: r[0][0])
        warm = min(r[0][0] for r in results if not r[1])
        print("restart: N=%d warm_ready_s=%.2f" % (args.n, warm))
        print("restart: N=%d ready_s=%.2f rate=%.0f (cold)" % (args.n, ready_s, rate))
    finally:
        if args.keep and args.data is None:
            print("kept %s" % data)
        else:
            shutil.rmtree(tmp, ignore_errors=True)  # never an existing --data store


if __name__ == "__main__":
    main()
