#!/usr/bin/env python3
"""A realistic archive: does a check cost the same on an
archive of 2M articles as on one of 100k?

    python3 tests/bench/bench_archive.py [--n 100000,2000000] [--build build]
        [--dir /tmp/nd-archive] [--duration 10] [--connections 32]
        [--stream 100000] [--worst] [--in-place] [--keep-source]

1. The archive (imported once per N and seed under --dir, reused): N
   synthetic articles, English or Chinese in the eval corpus's proportions
   (../shared/eval, 57 % en), each as long as an article of the corpus
   drawn at random (clipped to 350-4,000 characters), its words drawn from
   the corpus's own word frequencies (English words; Chinese as two-character
   pieces of its Han runs), in sentences and paragraphs. A share carries
   boilerplate: 50 standard paragraphs (disclaimers, footers, intros: real
   paragraphs of the corpus, 25 per language), each in a share of all the
   articles drawn log-uniformly from 0.1-5 %, as an intro or a footer.
   Article i is a function of (seed, i), so any stored one can be rebuilt.
2. The stream: new articles (unique, drawn like the archive's, boilerplate
   included), 1 % edited copies of stored articles (3 % of the words
   replaced, a sentence dropped), 1 % spliced (the first half of one stored
   article, the second half of another), each line's kind drawn at random.
3. For each N: `neardup import` of the archive into a store (kept; the
   archive is generated into the import's standard input), then neardupd
   (default threads) on a copy of it (--in-place: on the store itself),
   and tests/bench/loadgen --texts with --connections clients (one client
   thread) for --duration seconds: the stream with register
   off, then the same stream with register on (fsync on; the store grows by
   the registrations of that run). Server CPU per request from
   /proc/PID/stat (user + system, all threads) before and after; p50/p99
   from loadgen; verdicts from /metrics. With --worst, also the old fixed
   pool (bench_http.py's 3,000 corpus paragraphs, four per article,
   register on) on the same store: the labelled worst case.
Prints a table per N, then the ratios of the largest N to the smallest and
the issue's targets (check CPU at 2M <= 1.15x at 100k, registration <= 1.15x,
registration <= 2x a register-off check, p99 at 2M <= 2 ms).

The server does not count candidates verified per check; bench_instructions.py
counts them under callgrind (calls of the sketch comparison)."""

import argparse
import collections
import gzip
import json
import math
import multiprocessing
import operator
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(ROOT, "..", "shared", "eval", "data", "corpus.jsonl.gz")
EN_SHARE = 0.57          # the eval corpus: 5,470 en, 4,099 zh
MIN_CHARS, MAX_CHARS = 350, 4000
N_BOILER = 50
COPY_SHARE = 0.01        # edited copies of stored articles in the stream
SPLICE_SHARE = 0.01      # spliced from two stored articles


# ---- the model, from the eval corpus ----

def build_model(cache):
    """Word frequencies, article lengths and 50 boilerplate paragraphs, from
    the eval corpus (cached as JSON in cache)."""
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            return json.load(f)
    if not os.path.exists(CORPUS):
        sys.exit("needs the eval corpus: %s" % CORPUS)
    en, zh = collections.Counter(), collections.Counter()
    lens = {"en": [], "zh": []}
    paras = {"en": [], "zh": []}
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            t, lang = d["text"], d["lang"]
            lens[lang].append(len(t))
            if lang == "en":
                en.update(re.findall(r"[a-z]+", t.lower()))
            else:
                for run in re.findall(r"[\u4e00-\u9fff]+", t):
                    zh.update(run[i:i + 2] for i in range(0, len(run) - 1, 2))
            for p in t.split("\n"):
                p = p.strip()
                if 200 <= len(p) <= 700:
                    paras[lang].append(p)
    r = random.Random(56)
    boiler = []
    for lang in ("en", "zh"):
        seen = sorted(set(paras[lang]))
        r.shuffle(seen)
        boiler += [{"lang": lang, "text": p} for p in seen[:N_BOILER // 2]]
    for b in boiler:  # each in 0.1-5 % of all articles, log-uniform
        b["share"] = math.exp(r.uniform(math.log(0.001), math.log(0.05)))
        b["where"] = r.choice(("intro", "footer"))
    model = {"en_words": [w for w, _ in en.most_common(60000)],
             "en_counts": [c for _, c in en.most_common(60000)],
             "zh_words": [w for w, _ in zh.most_common(60000)],
             "zh_counts": [c for _, c in zh.most_common(60000)],
             "lens": lens, "boiler": boiler}
    with open(cache + ".part", "w", encoding="utf-8") as f:
        json.dump(model, f, ensure_ascii=False)
    os.replace(cache + ".part", cache)
    return model


HEAD_BITS = 16  # words drawn 16 bits at a time through tables (itemgetter: no Python loop)


def draw_table(words, counts):
    """A 65,536-slot table whose slots hold words in proportion to counts;
    slots of the rarer words hold None (drawn again from a second table of
    them the same way; rarer still are left out)."""
    size = 1 << HEAD_BITS
    total = sum(counts)
    head, tail, tail_counts = [], [], []
    for w, c in zip(words, counts):
        k = c * size // total
        if k:
            head += [w] * k
        else:
            tail.append(w)
            tail_counts.append(c)
    head += [None] * (size - len(head))
    if tail:
        tt = sum(tail_counts)
        second = []
        for w, c in zip(tail, tail_counts):
            second += [w] * (c * size // tt)
        for w in tail:  # the rarest words: a slot each while slots are left
            if len(second) >= size:
                break
            second.append(w)
        second = (second * 2)[:size] if len(second) < size else second[:size]
    else:
        second = [words[0]] * size
    return head, second


class Gen:
    """Articles as functions of (stream, index)."""

    def __init__(self, model, seed):
        self.seed = seed
        self.tables = {}
        self.mean = {}
        for lang in ("en", "zh"):
            words, counts = model[lang + "_words"], model[lang + "_counts"]
            self.tables[lang] = draw_table(words, counts)
            head = [w for w in self.tables[lang][0] if w is not None]
            self.mean[lang] = sum(len(w) for w in head) / len(head) + (1 if lang == "en" else
                                                                       0.1)
        self.lens = {k: sorted(min(MAX_CHARS, max(MIN_CHARS, x)) for x in v)
                     for k, v in model["lens"].items()}
        self.boiler = model["boiler"]

    def draw(self, r, lang, k):
        head, second = self.tables[lang]
        w = list(operator.itemgetter(*memoryview(r.randbytes(2 * k)).cast("H"))(head))
        miss = [i for i, x in enumerate(w) if x is None]
        if miss:
            more = operator.itemgetter(*memoryview(r.randbytes(2 * len(miss) + 2))
                                       .cast("H"))(second)
            for i, x in zip(miss, more):
                w[i] = x
        return w

    def body(self, r, lang, nchars):
        w = self.draw(r, lang, max(8, int(nchars / self.mean[lang]) + 1))
        shape = r.randbytes(len(w) // 3 + 8)  # sentence and clause lengths, breaks
        out, i, j = [], 0, 0
        en = lang == "en"
        while i < len(w):
            b = shape[j]
            j += 1
            n = 6 + b % 17  # 6-22 words a sentence
            sent = w[i:i + n]
            i += n
            if en:
                s = " ".join(sent)
                s = s[0].upper() + s[1:] + "."
            else:
                c = 2 + (b >> 5) % 7  # clauses of 2-8 pieces
                s = "，".join(["".join(sent[k:k + c]) for k in range(0, len(sent), c)]) + "。"
            out.append(s)
            if shape[j] < 51:  # a paragraph break after a fifth of the sentences
                out.append("\n\n")
            j += 1
        sep = " " if en else ""
        return sep.join(out).replace(" \n\n ", "\n\n").replace("\n\n ", "\n\n").strip()

    def article(self, stream, i):
        """(lang, text) of article i of stream (0: the archive)."""
        r = random.Random((self.seed * 1000003 + stream) * 4000000007 + i)
        lang = "en" if r.random() < EN_SHARE else "zh"
        nchars = r.choice(self.lens[lang])
        intro, footer = [], []
        frac = EN_SHARE if lang == "en" else 1 - EN_SHARE
        for b in self.boiler:
            if b["lang"] == lang and r.random() < b["share"] / frac:
                (intro if b["where"] == "intro" else footer).append(b["text"])
        text = self.body(r, lang, nchars)
        return lang, "\n\n".join(intro + [text] + footer)


def edited(r, text):
    """3 % of the words (or two-character pieces) replaced by others of the
    text, one sentence dropped."""
    sents = re.split(r"(?<=[.。])", text)
    if len(sents) > 3:
        del sents[r.randrange(1, len(sents) - 1)]
    t = "".join(sents)
    if " " in t:
        w = t.split(" ")
        for _ in range(max(1, len(w) * 3 // 100)):
            w[r.randrange(len(w))] = w[r.randrange(len(w))]
        return " ".join(w)
    c = list(t)
    for _ in range(max(1, len(c) * 3 // 200)):
        j, k = r.randrange(len(c) - 1), r.randrange(len(c) - 1)
        c[j:j + 2] = c[k:k + 2]
    return "".join(c)


def half(text, first):
    cut = text.find("\n\n", len(text) // 2)
    if cut < 0:
        cut = len(text) // 2
    return text[:cut] if first else text[cut:]


_GEN = None


def _init(model, seed):
    global _GEN
    _GEN = Gen(model, seed)


def _archive_line(i):
    _, text = _GEN.article(0, i)
    return json.dumps({"id": "a-%d" % i, "account": "acct-%d" % (i % 5000),
                       "registered_at": 1577836800000000 + i * 5000, "meta": {"n": i},
                       "text": text}, ensure_ascii=False)


def _stream_line(args):
    j, n = args
    r = random.Random(j * 7919 + 13)
    x = r.random()
    if x < COPY_SHARE:
        kind, text = "edited", edited(r, _GEN.article(0, r.randrange(n))[1])
    elif x < COPY_SHARE + SPLICE_SHARE:
        a, b = _GEN.article(0, r.randrange(n))[1], _GEN.article(0, r.randrange(n))[1]
        kind, text = "spliced", half(a, True) + "\n\n" + half(b, False)
    else:
        kind, text = "new", _GEN.article(1, j)[1]
    return kind, json.dumps(text, ensure_ascii=False)[1:-1]


def write_archive(out, model, seed, n):
    """The archive's n lines into the text file out (a file or a pipe)."""
    with multiprocessing.Pool(os.cpu_count(), _init, (model, seed)) as pool:
        t0 = time.monotonic()
        for i, line in enumerate(pool.imap(_archive_line, range(n), chunksize=2000)):
            out.write(line + "\n")
            if i and i % 500000 == 0:
                print("  archive: %d written (%.0f s)" % (i, time.monotonic() - t0), flush=True)


def write_stream(path, model, seed, n, m):
    kinds = collections.Counter()
    with multiprocessing.Pool(os.cpu_count(), _init, (model, seed)) as pool, \
            open(path + ".part", "w", encoding="utf-8") as f:
        for kind, line in pool.imap(_stream_line, ((j, n) for j in range(m)), chunksize=500):
            kinds[kind] += 1
            f.write(line + "\n")
    os.replace(path + ".part", path)
    return kinds


def stream_kinds(path_kinds):
    with open(path_kinds) as f:
        return json.load(f)


def prepare(a, n, model):
    """(store dir, stream file, stream kinds) for N, made when missing."""
    src = os.path.join(a.dir, "archive-%d-%d.jsonl" % (n, a.seed))
    store = os.path.join(a.dir, "store-%d-%d" % (n, a.seed))
    stream = os.path.join(a.dir, "stream-%d-%d-%d.txt" % (n, a.seed, a.stream))
    if not os.path.exists(os.path.join(store, "data.mdb")) or a.fresh_store:
        shutil.rmtree(store, ignore_errors=True)
        # the archive goes to the import through a pipe (written while it
        # imports); --keep-source also keeps it in src
        cmd = [os.path.join(a.build, "server", "neardup"), "import", "--data", store, "-",
               "--no-progress"]
        print("importing %d articles, generated on the fly: %s" % (n, " ".join(cmd)), flush=True)
        t0 = time.monotonic()
        out = open(os.path.join(a.dir, "import-%d-%d.out" % (n, a.seed)), "w")
        err = open(os.path.join(a.dir, "import-%d-%d.err" % (n, a.seed)), "w")
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=err,
                             text=True, encoding="utf-8")
        keep = open(src, "w", encoding="utf-8") if a.keep_source else None

        class Tee:
            def write(self, line):
                p.stdin.write(line)
                if keep:
                    keep.write(line)
        write_archive(Tee(), model, a.seed, n)
        p.stdin.close()
        cpu = 0.0
        while p.poll() is None:  # the import's own CPU (the generator's is not counted)
            try:
                cpu = cpu_of(p.pid)
            except (OSError, IndexError):
                pass
            time.sleep(0.2)
        rc = p.wait()
        wall = time.monotonic() - t0
        out.close()
        err.close()
        if keep:
            keep.close()
        if rc != 0:
            sys.exit("neardup import exited %d: see %s" % (rc, err.name))
        with open(out.name) as f:
            summary = json.loads(f.read().strip().splitlines()[-1])["summary"]
        print("  imported %d, duplicates %d, errors %d in %.1f s (%.0f/s; the import's CPU "
              "%.0f us each, read at its end)" % (summary["imported"], summary["duplicates"], summary["errors"],
                                 wall, summary["lines"] / wall,
                                 1e6 * cpu / max(1, summary["lines"])), flush=True)
        with open(os.path.join(a.dir, "import-%d-%d.json" % (n, a.seed)), "w") as f:
            json.dump({"summary": summary, "wall_s": wall, "cpu_s": cpu}, f)
    if not os.path.exists(stream):
        print("writing %s (%d texts)" % (stream, a.stream), flush=True)
        kinds = write_stream(stream, model, a.seed, n, a.stream)
        with open(stream + ".kinds", "w") as f:
            json.dump(kinds, f)
    return store, stream, stream_kinds(stream + ".kinds")


# ---- the server ----

def cpu_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(a, store, log):
    err = open(log, "wb")
    p = subprocess.Popen([os.path.join(a.build, "server", "neardupd"), "--listen",
                          "127.0.0.1:0", "--data", store, "--no-access-log"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 600
    port = None
    while port is None and time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit("neardupd exited: " + open(log).read()[-2000:])
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if '"msg":"listening"' in line:
                    port = json.loads(line)["port"]
        time.sleep(0.1)
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    return p, err, port


def stop(p, err):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    err.close()


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = collections.Counter()
    for m in re.finditer(r'^neardup_(checks_total|registrations_total)\{(\w+)="(\w+)"\} (\d+)',
                         text, re.M):
        out[m.group(3)] += int(m.group(4))
    return out


def loadgen(a, port, args):
    cmd = [os.path.join(a.build, "tests", "bench", "loadgen"), "--port", str(port),
           "--connections", str(a.connections), "--threads", "1", "--duration",
           str(a.duration), "--seed", "7"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.duration + 120)
    if out.returncode != 0:
        sys.exit("loadgen failed: " + out.stderr)
    return json.loads(out.stdout)


def scenario(a, p, port, args):
    m0 = metrics(port)
    c0 = cpu_of(p.pid)
    d = loadgen(a, port, args)
    cpu = cpu_of(p.pid) - c0
    m1 = metrics(port)
    ok = d["status"].get("200", 0)
    return {"requests": d["requests"], "rps": d["rps"], "p50": d["p50_ms"], "p99": d["p99_ms"],
            "cpu_us": 1e6 * cpu / max(1, d["requests"]), "errors": d["errors"],
            "non200": d["requests"] - ok, "registered": m1["ok"] - m0["ok"],
            "not_original": sum(m1[k] - m0[k] for k in ("duplicate", "partial_copy",
                                                         "compilation", "quotation"))}


def worst_pool(tmp):
    sys.path.insert(0, HERE)
    import bench_http
    paras = bench_http.load_paragraphs([])
    path = os.path.join(tmp, "worst-paragraphs.txt")
    with open(path, "w", encoding="utf-8") as f:
        for p in paras:
            f.write(json.dumps(p, ensure_ascii=False)[1:-1] + "\n")
    return path, len(paras)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="100000,2000000", help="archive sizes, comma-separated")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=os.environ.get("ND_BENCH_DIR", "/tmp/nd-archive"))
    ap.add_argument("--seed", type=int, default=56)
    ap.add_argument("--stream", type=int, default=100000, help="texts in the stream")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--worst", action="store_true", help="also the fixed pool (worst case)")
    ap.add_argument("--fresh-store", action="store_true", help="import again")
    ap.add_argument("--keep-source", action="store_true", help="keep the archive's JSONL")
    ap.add_argument("--only-prepare", action="store_true")
    ap.add_argument("--in-place", action="store_true",
                    help="run on the kept store itself, not a copy (its registrations stay)")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    os.makedirs(a.dir, exist_ok=True)
    model = build_model(os.path.join(a.dir, "model.json"))
    sizes = [int(x) for x in a.n.split(",")]
    prepared = {n: prepare(a, n, model) for n in sizes}
    if a.only_prepare:
        return
    results = {}
    for n in sizes:
        store, stream, kinds = prepared[n]
        # each run starts from the imported store: registrations of an
        # earlier run are not kept
        run_store = store if a.in_place else store + "-run"
        if not a.in_place:
            shutil.rmtree(run_store, ignore_errors=True)
            shutil.copytree(store, run_store)
        t0 = time.monotonic()
        p, err, port = start(a, run_store, os.path.join(a.dir, "neardupd-%d.log" % n))
        ready = time.monotonic() - t0
        try:
            res = {"ready_s": ready, "kinds": kinds}
            res["off"] = scenario(a, p, port, ["--texts", stream, "--register", "0"])
            res["on"] = scenario(a, p, port, ["--texts", stream, "--register", "1"])
            if a.worst:
                path, npara = worst_pool(a.dir)
                res["worst"] = scenario(a, p, port, ["--paragraphs", path])
                res["worst_pool"] = npara
            with open("/proc/%d/status" % p.pid) as f:
                res["rss_mb"] = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
        finally:
            stop(p, err)
            if not a.in_place:
                shutil.rmtree(run_store, ignore_errors=True)
        results[n] = res
        print_table(n, res, a)
    if len(sizes) > 1:
        print_ratios(results, min(sizes), max(sizes))


def print_table(n, res, a):
    k = res["kinds"]
    print("\n# N = %d archived articles: neardupd ready in %.1f s, RSS %.0f MB at the end; "
          "loadgen %d connections x %d s; stream: %d new, %d edited, %d spliced; load %.1f"
          % (n, res["ready_s"], res["rss_mb"], a.connections, a.duration, k.get("new", 0),
             k.get("edited", 0), k.get("spliced", 0), os.getloadavg()[0]))
    print("%-38s %9s %8s %8s %9s %10s %12s %7s" % ("scenario", "requests", "req/s", "p50 ms",
                                                   "p99 ms", "CPU us/req", "registered",
                                                   "not orig"))
    rows = [("check, register off (stream)", "off"), ("registration, register on (stream)", "on")]
    if "worst" in res:
        rows.append(("WORST CASE: fixed pool of %d, reg on" % res["worst_pool"], "worst"))
    for label, key in rows:
        r = res[key]
        bad = "  (non-200 %d, errors %d)" % (r["non200"], r["errors"]) if r["non200"] or \
            r["errors"] else ""
        print("%-38s %9d %8.0f %8.3f %9.3f %10.1f %12d %7d%s" % (
            label, r["requests"], r["rps"], r["p50"], r["p99"], r["cpu_us"], r["registered"],
            r["not_original"], bad))
    print("registration / check CPU: %.2f x (target <= 2)" % (res["on"]["cpu_us"] /
                                                             res["off"]["cpu_us"]))
    sys.stdout.flush()


def print_ratios(results, lo, hi):
    a, b = results[lo], results[hi]
    print("\n# ratios N = %d / N = %d (same run)" % (hi, lo))
    print("%-44s %10s %10s %8s  %s" % ("figure", "N=%d" % lo, "N=%d" % hi, "ratio", "target"))

    def row(label, x, y, target, fmt="%10.1f"):
        r = y / x if x else float("nan")
        print(("%-44s " + fmt + " " + fmt + " %7.2fx  %s") % (label, x, y, r, target))

    row("check CPU us/request (register off)", a["off"]["cpu_us"], b["off"]["cpu_us"],
        "<= 1.15x: %s" % ("met" if b["off"]["cpu_us"] <= 1.15 * a["off"]["cpu_us"]
                          else "NOT met"))
    row("registration CPU us/request", a["on"]["cpu_us"], b["on"]["cpu_us"],
        "<= 1.15x: %s" % ("met" if b["on"]["cpu_us"] <= 1.15 * a["on"]["cpu_us"] else "NOT met"))
    for key, what in (("off", "check"), ("on", "registration")):
        row("%s p50 ms" % what, a[key]["p50"], b[key]["p50"], "", "%10.3f")
        row("%s p99 ms" % what, a[key]["p99"], b[key]["p99"],
            ("p99 at %d <= 2 ms: %s" % (hi, "met" if b[key]["p99"] <= 2 else "NOT met"))
            if key == "off" else "", "%10.3f")
    for n, r in ((lo, a), (hi, b)):
        x = r["on"]["cpu_us"] / r["off"]["cpu_us"]
        print("registration / check CPU at N=%d: %.2fx (target <= 2: %s)"
              % (n, x, "met" if x <= 2 else "NOT met"))
    if "worst" in a and "worst" in b:
        row("WORST CASE registration CPU us/request", a["worst"]["cpu_us"],
            b["worst"]["cpu_us"], "<= 1.5x: %s" % (
                "met" if b["worst"]["cpu_us"] <= 1.5 * a["worst"]["cpu_us"] else "NOT met"))


if __name__ == "__main__":
    main()
