#!/usr/bin/env python3
"""Server CPU per /check-original (register off) with and without matches,
for this build and another (--base, e.g. the release before passages on
both sides), in the same run: what the matches' passages cost, and that a
check without matches costs what it did.

    python3 tests/bench/bench_passages.py [--build build] [--base OTHER/neardupd]
        [--docs 2000] [--queries 1000] [--rounds 3]

Each server (LMDB, --no-sync, one worker thread) registers the same --docs
corpus documents of ../shared/eval (or $ND_EVAL_DATA); then, in rounds that
alternate the servers, it answers --queries other corpus documents (the
"original" set: those of them whose check lists no match) and edited
copies of registered documents (the "copies" set: those whose check lists
a match). The
server's CPU time (all its threads' time on a CPU, /proc/PID/task/*/schedstat,
nanoseconds) per request is printed per set,
the median round; the copies' figure minus the originals' is the cost of a
check with matches, and the difference between the two builds on it the
cost of the passages (one text read and sketched per listed match). Loopback
only; every server is stopped. A benchmark: exits 0 unless a server fails."""

import argparse
import gzip
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def eval_dir():
    for d in (os.environ.get("ND_EVAL_DATA"), os.path.join(ROOT, "..", "shared", "eval", "data")):
        if d and os.path.exists(os.path.join(d, "corpus.jsonl.gz")):
            return d
    sys.exit("no evaluation data: set ND_EVAL_DATA")


def load(ndocs, nq):
    d = eval_dir()
    corpus = []
    with gzip.open(os.path.join(d, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            corpus.append((o["id"], o["text"]))
    rnd = random.Random(35)
    rnd.shuffle(corpus)
    docs, rest = corpus[:ndocs], corpus[ndocs:]
    ids = {i for i, _ in docs}
    copies = []
    with gzip.open(os.path.join(d, "edited.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if o["src"] in ids and o["kind"] in ("light", "format", "evasion", "para_move"):
                copies.append(o["text"])
    rnd.shuffle(copies)
    return docs, [t for _, t in rest[:nq]], copies[:nq]


class Srv:
    def __init__(self, binary, tmp, callgrind=False):
        self.tmp = tempfile.mkdtemp(dir=tmp)
        self.callgrind = callgrind
        wrap = (["valgrind", "--tool=callgrind",
                 "--callgrind-out-file=" + os.path.join(self.tmp, "cg.%p")] if callgrind else [])
        log = os.path.join(self.tmp, "stderr.log")
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                wrap + [binary, "--listen", "127.0.0.1:0", "--data", os.path.join(self.tmp, "data"),
                 "--threads", "1", "--no-sync", "--no-access-log"]
                + (["--map-size", "1073741824"] if callgrind else []),  # valgrind: a smaller map
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self.port = None
        deadline = time.monotonic() + (300 if callgrind else 30)
        while self.port is None and time.monotonic() < deadline and self.proc.poll() is None:
            with open(log, "rb") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "listening":
                        self.port = rec["port"]
            time.sleep(0.02)
        if self.port is None:
            self.stop()
            sys.exit("%s did not start" % binary)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        for _ in range(300):
            if self.post("/readyz", None, "GET")[0] == 200:
                break
            time.sleep(0.05)

    def post(self, path, obj, method="POST"):
        body = None if obj is None else json.dumps(obj).encode()
        self.conn.request(method, path, body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()

    def cpu(self):
        """Seconds on CPU of all the server's threads (schedstat: ns)."""
        total = 0
        task = "/proc/%d/task" % self.proc.pid
        for t in os.listdir(task):
            try:
                with open(os.path.join(task, t, "schedstat")) as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass  # a thread that ended meanwhile
        return total / 1e9

    def instructions(self):
        """Instructions executed since the last call (callgrind: a dump,
        which resets the counters)."""
        before = set(os.listdir(self.tmp))
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        for _ in range(600):
            new = [f for f in set(os.listdir(self.tmp)) - before if f.startswith("cg.")]
            if new:
                time.sleep(0.5)  # written whole
                with open(os.path.join(self.tmp, new[0])) as f:
                    for line in f:
                        if line.startswith(("summary:", "totals:")):
                            return int(line.split()[1])
            time.sleep(0.1)
        sys.exit("no callgrind dump")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_set(srv, texts):
    c0 = srv.cpu()
    matches = 0
    for t in texts:
        status, data = srv.post("/check-original", {"text": t})
        if status == 200:
            matches += len(json.loads(data)["matches"])
    return (srv.cpu() - c0) / len(texts) * 1e6, matches / len(texts)


def split_by_matches(srv, texts):
    """(texts whose check lists no match, texts whose check lists one or more)."""
    none, some = [], []
    for t in texts:
        status, data = srv.post("/check-original", {"text": t})
        if status == 200:
            (some if json.loads(data)["matches"] else none).append(t)
    return none, some


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--base", default=None)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per request under callgrind instead of CPU time "
                         "(one round; keep --docs and --queries small)")
    a = ap.parse_args()
    if a.callgrind:
        return callgrind(a)
    docs, originals, copies = load(a.docs, a.queries)
    bins = {"this": os.path.join(a.build, "server", "neardupd")}
    if a.base:
        bins["base"] = a.base
    res = {(k, s): [] for k in bins for s in ("original", "copies")}
    with tempfile.TemporaryDirectory() as tmp:
        srvs = {}
        try:
            for k, b in bins.items():
                srvs[k] = Srv(b, tmp)
                for i, t in docs:
                    srvs[k].post("/check-original", {"id": i, "text": t, "register": True})
            # the originals: checks that list no match (the path passages must
            # not slow down); the copies: checks that list their source
            originals, _ = split_by_matches(srvs["this"], originals)
            _, copies = split_by_matches(srvs["this"], copies)
            for _ in range(a.rounds):
                for s, texts in (("original", originals), ("copies", copies)):
                    for k in bins:
                        res[(k, s)].append(run_set(srvs[k], texts))
        finally:
            for s in srvs.values():
                s.stop()
    print("server CPU per /check-original (register off, 1 thread, LMDB), median of %d rounds"
          % a.rounds)
    for s, n in (("original", len(originals)), ("copies", len(copies))):
        for k in bins:
            us = statistics.median(x[0] for x in res[(k, s)])
            m = res[(k, s)][0][1]
            print("  %-8s %-5s %8.1f us/request  (%d requests, %.2f matches each)"
                  % (s, k, us, n, m))
    if "base" in bins:
        for s in ("original", "copies"):
            t = statistics.median(x[0] for x in res[("this", s)])
            b = statistics.median(x[0] for x in res[("base", s)])
            print("  %-8s this/base %.3f" % (s, t / b))


def callgrind(a):
    docs, originals, copies = load(a.docs, a.queries)
    bins = {"this": os.path.join(a.build, "server", "neardupd")}
    if a.base:
        bins["base"] = a.base
    with tempfile.TemporaryDirectory() as tmp:
        # the sets, chosen on a plain server of this build
        plain = Srv(bins["this"], tmp)
        try:
            for i, t in docs:
                plain.post("/check-original", {"id": i, "text": t, "register": True})
            originals, _ = split_by_matches(plain, originals)
            _, copies = split_by_matches(plain, copies)
        finally:
            plain.stop()
        print("server instructions per /check-original (register off, 1 thread, LMDB, "
              "callgrind)")
        out = {}
        for k, b in bins.items():
            srv = Srv(b, tmp, callgrind=True)
            try:
                for i, t in docs:
                    srv.post("/check-original", {"id": i, "text": t, "register": True})
                srv.instructions()
                for name, texts in (("original", originals), ("copies", copies)):
                    m = run_set(srv, texts)[1]
                    out[(k, name)] = srv.instructions() / len(texts)
                    print("  %-8s %-5s %10.0f instructions/request  (%d requests, %.2f matches "
                          "each)" % (name, k, out[(k, name)], len(texts), m), flush=True)
            finally:
                srv.stop()
        if "base" in bins:
            for name in ("original", "copies"):
                print("  %-8s this/base %.4f" % (name, out[("this", name)] / out[("base", name)]))


if __name__ == "__main__":
    main()
