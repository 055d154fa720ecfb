#!/usr/bin/env python3
"""Instructions, not seconds: callgrind instructions per
/check-original on a preloaded store, and the candidates each one verified.

    python3 tests/bench/bench_instructions.py [--build build] [--n 100000]
        [--dir /tmp/nd-archive] [--requests 100] [--compare OTHER/neardupd ...]

The store is bench_archive.py's archive of --n articles (imported once under
--dir and reused; each server runs on a copy). neardupd runs under
`valgrind --tool=callgrind` with one worker (--threads 1); the requests go
one at a time over one connection, and a callgrind dump after each set
gives its instructions (the server's, all threads). Sets, --requests each:
  check zh 2 KB   eval corpus Chinese articles of 1.5-2.6 KB, register off
                  (the texts of bench_http.py's register-off scenario); 20
                  more corpus texts are sent first, not counted (warm-up)
  check en 2 KB   eval corpus English articles of 1.8-2.3 KB, register off
  check stream    the first texts of bench_archive.py's stream, register off
  registration    the same stream texts, register on (each a new id)
The same sets run on an empty store first (the baseline of the same run:
the store's share of a check is the difference). "verified/req" is the
calls of nd_sketch_compare_bounded() per request: candidates whose sketch
was read and compared. With --compare, every set also runs with the other
binaries (e.g. the fingerprint-only build, dc6c422, or the build before),
on copies of the same store. Needs valgrind; takes 5-15 minutes."""

import argparse
import gzip
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bench_archive  # noqa: E402

VERIFY_FN = "nd_sketch_compare_bounded"


def corpus_texts(lang, lo, hi, limit):
    out = []
    with gzip.open(bench_archive.CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d["lang"] == lang and lo <= len(d["text"].encode()) <= hi:
                out.append(d["text"])
                if len(out) >= limit:
                    break
    return out


class Srv:
    def __init__(self, binary, data, tmp, map_size):
        self.tmp = tempfile.mkdtemp(dir=tmp)
        log = os.path.join(self.tmp, "stderr.log")
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--callgrind-out-file=" +
                 os.path.join(self.tmp, "cg.%p"), binary, "--listen", "127.0.0.1:0", "--data",
                 data, "--threads", "1", "--no-access-log", "--map-size", str(map_size)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        self.port = None
        deadline = time.monotonic() + 1800
        while self.port is None and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit("%s exited: %s" % (binary, open(log).read()[-3000:]))
            with open(log, "rb") as f:
                for line in f:
                    if b'"msg":"listening"' in line:
                        self.port = json.loads(line)["port"]
            time.sleep(0.2)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        while self.post("/readyz", None, "GET")[0] != 200:
            time.sleep(0.5)

    def post(self, path, obj, method="POST"):
        # raw UTF-8, as platforms send it (\\uXXXX escapes cost the server's
        # JSON reader ~100k instructions more per 2 KB Chinese text)
        body = None if obj is None else json.dumps(obj, ensure_ascii=False).encode()
        self.conn.request(method, path, body, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()

    def dump(self):
        """(instructions, calls of VERIFY_FN) since the last dump."""
        before = set(os.listdir(self.tmp))
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(1200):
            new = [f for f in set(os.listdir(self.tmp)) - before if f.startswith("cg.")]
            if new:
                time.sleep(1.0)  # written whole
                return parse(os.path.join(self.tmp, new[0]))
            time.sleep(0.1)
        sys.exit("no callgrind dump")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def parse(path):
    """Total instructions and the calls of VERIFY_FN in a callgrind dump."""
    names, total, calls, target = {}, 0, 0, False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
            elif line.startswith("cfn="):
                m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    target = names.get(m.group(1)) == VERIFY_FN
                else:
                    target = line[4:].strip() == VERIFY_FN
            elif line.startswith("fn="):
                m = re.match(r"fn=\((\d+)\) (.*)", line.rstrip("\n"))
                if m:
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls=") and target:
                calls += int(line[6:].split()[0])
                target = False
    return total, calls


def run_sets(srv, sets, warmup):
    for t in warmup:  # first requests fill the server's caches and scratch: not counted
        srv.post("/check-original", {"text": t, "k": 3})
    srv.dump()
    out = {}
    for name, texts, register in sets:
        verdicts = {}
        for i, t in enumerate(texts):
            body = {"text": t, "k": 3}
            if register:
                body.update({"id": "cg-%s-%d" % (name.replace(" ", "-"), i), "register": True})
            status, data = srv.post("/check-original", body)
            v = json.loads(data).get("verdict", "status %d" % status) if status == 200 else \
                "status %d" % status
            verdicts[v] = verdicts.get(v, 0) + 1
        ins, calls = srv.dump()
        out[name] = (ins / len(texts), calls / len(texts), verdicts)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--n", type=int, default=100000, help="articles in the preloaded store")
    ap.add_argument("--dir", default=os.environ.get("ND_BENCH_DIR", "/tmp/nd-archive"))
    ap.add_argument("--seed", type=int, default=56)
    ap.add_argument("--stream", type=int, default=100000,
                    help="bench_archive.py's stream length (its file is shared)")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--skip", type=int, default=0,
                    help="skip the stream's first texts (registered by a bench_archive.py "
                         "--in-place run on the same store)")
    ap.add_argument("--compare", nargs="*", default=[], help="other neardupd binaries")
    ap.add_argument("--no-empty", action="store_true", help="skip the empty-store baseline")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.fresh_store = False
    a.keep_source = False
    os.makedirs(a.dir, exist_ok=True)
    if not shutil.which("valgrind"):
        sys.exit("needs valgrind (apt-get install valgrind)")
    model = bench_archive.build_model(os.path.join(a.dir, "model.json"))
    store, stream, _ = bench_archive.prepare(a, a.n, model)
    with open(stream, encoding="utf-8") as f:
        for _ in range(a.skip):
            next(f)
        stream_texts = [json.loads('"' + next(f).rstrip("\n") + '"') for _ in range(a.requests)]
    zh = corpus_texts("zh", 1500, 2600, a.requests + 10)
    en = corpus_texts("en", 1800, 2300, a.requests + 10)
    warmup = zh[a.requests:] + en[a.requests:]
    sets = [("check zh 2 KB", zh[:a.requests], False),
            ("check en 2 KB", en[:a.requests], False),
            ("check stream", stream_texts, False),
            ("registration", stream_texts, True)]
    size = os.path.getsize(os.path.join(store, "data.mdb"))
    map_size = max(1 << 30, (size * 3 // 2 + (1 << 20) - 1) >> 20 << 20)
    bins = [("this", os.path.join(a.build, "server", "neardupd"))]
    bins += [("other%d" % (i + 1), b) for i, b in enumerate(a.compare)]
    results = {}
    print("# callgrind, neardupd --threads 1, %d requests per set, one at a time; store: %d "
          "articles (bench_archive.py, seed %d, %.0f MB); load %.1f" % (
              a.requests, a.n, a.seed, size / 1e6, os.getloadavg()[0]), flush=True)
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for label, binary in bins:
            stores = [("empty", None)] if not a.no_empty else []
            stores.append(("N=%d" % a.n, store))
            for sname, src in stores:
                data = os.path.join(tmp, "data-%s-%s" % (label, sname))
                if src:
                    shutil.copytree(src, data)
                t0 = time.monotonic()
                srv = Srv(binary, data, tmp, map_size)
                print("  %s on %s: ready under callgrind in %.0f s" % (
                    label, sname, time.monotonic() - t0), flush=True)
                try:
                    results[(label, sname)] = run_sets(srv, sets, warmup)
                finally:
                    srv.stop()
                    shutil.rmtree(data, ignore_errors=True)
    print("\n%-8s %-9s %-15s %14s %13s  %s" % ("binary", "store", "set", "instr/request",
                                               "verified/req", "verdicts"))
    for (label, sname), res in results.items():
        for name, _, _ in sets:
            ins, calls, verdicts = res[name]
            print("%-8s %-9s %-15s %14.0f %13.2f  %s" % (
                label, sname, name, ins, calls,
                ", ".join("%s %d" % kv for kv in sorted(verdicts.items()))))
    key = "N=%d" % a.n
    for label, _ in bins:
        if (label, "empty") in results:
            print("\n%s: N=%d / empty store" % (label, a.n))
            for name, _, _ in sets:
                print("  %-15s %.3fx" % (name, results[(label, key)][name][0] /
                                        results[(label, "empty")][name][0]))
        r = results[(label, key)]
        print("%s: registration / check of the same texts (stream): %.2fx" % (
            label, r["registration"][0] / r["check stream"][0]))
        zh = r["check zh 2 KB"][0]
        print("%s: check zh 2 KB on N=%d: %.0fk instructions (target <= 300k: %s)" % (
            label, a.n, zh / 1000, "met" if zh <= 300000 else "NOT met"))
    for label, _ in bins[1:]:
        print("\nthis / %s (N=%d)" % (label, a.n))
        for name, _, _ in sets:
            print("  %-15s %.3fx" % (name, results[("this", key)][name][0] /
                                    results[(label, key)][name][0]))


if __name__ == "__main__":
    main()
