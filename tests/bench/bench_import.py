#!/usr/bin/env python3
"""Day-one backfill speed: `neardup import` of N synthetic documents, then
the server's start on the imported store (the target: >= 50k documents/s,
durable at the end; the start within the restart target).

    python3 tests/bench/bench_import.py [--n 10000000] [--build build]
                                        [--dir DIR] [--threads N] [--dups 0.001]
                                        [--shuffle] [--keep] [--no-restart]

1. Writes DIR/synth-N-SEED.jsonl (kept and reused by later runs; DIR is
   $ND_BENCH_DIR or /tmp): N documents of 300-1500 characters drawn from a
   list of 20,000 pseudo-words (every document its own random choice, so
   fingerprints and sketches differ), each with an id, an account, a meta
   and an increasing registered_at (integer microseconds; --shuffle writes
   the lines in random order: the import sorts them); a share --dups of
   them are light edits of an earlier document (reported as duplicates).
2. Runs `neardup import --data DIR/import-data FILE --no-progress` on a new
   store and prints its wall time, its CPU seconds (user + system, all its
   threads), documents per second (imported / wall seconds, which includes
   the final flush: durable at exit) and the load average before and after
   (the machine is shared: CPU seconds are the steadier figure).
3. Unless --no-restart, runs bench_restart.py --data on the imported store
   (cold and warm: exec -> /readyz 200).

Last line: import: N=<n> docs_per_s=<rate> cpu_s=<s> wall_s=<s> load=<1 min avg>
"""

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def words(seed):
    r = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(r.choice(letters) for _ in range(r.randint(2, 10))) for _ in range(20000)]


def generate(path, n, seed, dups, shuffle):
    r = random.Random(seed)
    vocab = words(seed)
    t0 = 1577836800000000  # 2020-01-01, one document every 5 ms or so
    lines = [] if shuffle else None
    tmp = path + ".part"
    started = time.monotonic()
    with open(tmp, "w", encoding="utf-8") as f:
        recent = []
        for i in range(n):
            if recent and r.random() < dups:
                base = r.choice(recent).split(" ")
                for _ in range(3):
                    base[r.randrange(len(base))] = r.choice(vocab)
                text = " ".join(base)
            else:
                nw = r.randint(50, 250)  # ~6 characters a word: 300-1500 characters
                text = " ".join(r.choices(vocab, k=nw))
                while len(text) - text.count(" ") < 320:  # the server counts no spaces
                    text += " " + " ".join(r.choices(vocab, k=20))
                if len(recent) < 1000:
                    recent.append(text)
                else:
                    recent[r.randrange(1000)] = text
            t0 += r.randint(1, 10000)
            line = json.dumps({"id": "doc-%d" % i, "account": "acct-%d" % (i % 5000),
                               "registered_at": t0, "meta": {"n": i}, "text": text})
            if shuffle:
                lines.append(line)
            else:
                f.write(line + "\n")
            if i and i % 1000000 == 0:
                print("  generated %d (%.0f s)" % (i, time.monotonic() - started), flush=True)
        if shuffle:
            r.shuffle(lines)
            for line in lines:
                f.write(line + "\n")
    os.replace(tmp, path)


def cpu_children():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10000000)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=os.environ.get("ND_BENCH_DIR", "/tmp"))
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, help="neardup import --threads (default: cores)")
    ap.add_argument("--dups", type=float, default=0.001, help="share of light copies")
    ap.add_argument("--shuffle", action="store_true", help="lines out of registered_at order")
    ap.add_argument("--keep", action="store_true", help="keep the imported store")
    ap.add_argument("--no-restart", action="store_true")
    a = ap.parse_args()

    src = os.path.join(a.dir, "synth-%d-%d%s.jsonl" % (a.n, a.seed, "-shuf" if a.shuffle else ""))
    if not os.path.exists(src):
        print("writing %s" % src, flush=True)
        generate(src, a.n, a.seed, a.dups, a.shuffle)
    size = os.path.getsize(src)
    data = os.path.join(a.dir, "import-data-%d" % os.getpid())
    shutil.rmtree(data, ignore_errors=True)
    cmd = [os.path.join(a.build, "server", "neardup"), "import", "--data", data, src,
           "--no-progress"]
    if a.threads is not None:
        cmd += ["--threads", str(a.threads)]
    load0 = os.getloadavg()
    cpu0 = cpu_children()
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    cpu = cpu_children() - cpu0
    load1 = os.getloadavg()
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
        raise SystemExit("neardup import exited %d" % p.returncode)
    summary = json.loads(p.stdout.strip().splitlines()[-1])["summary"]
    dups = sum(1 for line in p.stdout.splitlines() if '"source"' in line)
    rate = (summary["imported"] + summary["existing"]) / wall
    print("input: %d lines, %.1f MB; store: %.1f MB" % (
        summary["lines"], size / 1e6,
        os.path.getsize(os.path.join(data, "data.mdb")) / 1e6))
    print("imported %d, existing %d, duplicates %d (%d reported), errors %d" % (
        summary["imported"], summary["existing"], summary["duplicates"], dups, summary["errors"]))
    print("wall %.1f s (the import's own clock: %.1f s), CPU %.1f s (%.0f us/doc), "
          "load average %.2f -> %.2f" % (wall, summary["seconds"], cpu,
                                         1e6 * cpu / max(1, summary["lines"]), load0[0], load1[0]))
    print("stderr: %s" % p.stderr.strip().splitlines()[-1])
    print("peak RSS of the import: %.0f MB (the mapped input counts too)" % (
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024), flush=True)
    if not a.no_restart:  # the store holds the originals only: tell bench_restart how many
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "bench_restart.py"),
                        "--build", a.build, "--data", data,
                        "--n", str(summary["imported"] + summary["existing"])], check=False)
    if not a.keep:
        shutil.rmtree(data, ignore_errors=True)
    else:
        print("store kept: %s" % data)
    print("import: N=%d docs_per_s=%.0f cpu_s=%.1f wall_s=%.1f load=%.2f" % (
        a.n, rate, cpu, wall, (load0[0] + load1[0]) / 2))


if __name__ == "__main__":
    main()
