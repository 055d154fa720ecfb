#!/usr/bin/env python3
"""Offline simulator of the two-stage verdict, scored exactly as
../shared/eval/verdict.py scores a server, to choose the defaults quickly.

It runs `neardup sketch --jsonl --anchors 64` once over the corpus and the
edited copies (cached in --cache), then replays verdict.py's three phases:
  1. negatives: register a alone, check b; a false positive when b is judged
     not original because of a;
  2. corpus in file order, registering each document judged original (the
     server registers only originals); false flags by verdict.py's rule (no
     match with J >= 0.5 in natural_pairs.jsonl nor holding >= half of the
     document's ground-truth shingles); natural pairs: the later one lists the
     earlier one;
  3. edited copies, checked without registering: a hit when the source is
     among the matches.
A check: texts with fewer than 300 chars are refused (422, a miss). Stage 1:
candidates = SimHash within k (exact) + the best V documents of the anchor
index (a stored document is indexed under its first M anchors; the query
probes its first Q; anchors held by more than `cap` documents are skipped;
rank: shared anchors, then earlier registration). Stage 2: every candidate is
verified: identical text, resemblance >= R (near_duplicate), containment of
the query in the doc >= C, or (if --min-containment-r <= 1) containment of the
doc in the query >= CR (partial_copy). Matches are the verified candidates.

  python3 tests/bench/verdict_sim.py --neardup build-sk/server/neardup \
      [--k 3] [--M 16] [--Q 32] [--cap 64] [--V 32] [--R 0.5] [--C 0.5] [--CR 2] \
      [--grid] [--json out.json]
"""
import argparse, collections, gzip, hashlib, json, os, re, subprocess, sys, time, unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def load(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            op = gzip.open if p.endswith(".gz") else open
            with op(p, "rt", encoding="utf-8") as f:
                return [json.loads(l) for l in f if l.strip()]
    raise SystemExit(f"missing {path}[.gz]")


def gt_shingles(text, lang):
    t = unicodedata.normalize("NFKC", text).lower()
    if lang == "zh":
        t = "".join(c for c in t if unicodedata.category(c)[0] not in "PZCS")
        return {t[i:i + 5] for i in range(max(1, len(t) - 4))}
    w = re.findall(r"\w+", t)
    return {" ".join(w[i:i + 3]) for i in range(max(1, len(w) - 2))}


def sketch_all(neardup, items, cache):
    """items: [(key, text)] -> {key: record}. Cached by sha1 of the text."""
    have = {}
    if cache and os.path.exists(cache):
        with open(cache) as f:
            for l in f:
                r = json.loads(l)
                have[r["id"]] = r
    todo = []
    keyof = {}
    for key, text in items:
        h = hashlib.sha1(text.encode()).hexdigest()
        keyof[key] = h
        if h not in have:
            todo.append((h, text))
    if todo:
        todo = list(dict(todo).items())
        inp = "".join(json.dumps({"id": h, "text": t}) + "\n" for h, t in todo)
        t0 = time.time()
        out = subprocess.run([neardup, "sketch", "--jsonl", "--anchors", "64"], input=inp.encode(),
                             stdout=subprocess.PIPE, check=True).stdout.decode()
        print(f"sketched {len(todo)} texts in {time.time() - t0:.1f} s", file=sys.stderr)
        new = [json.loads(l) for l in out.splitlines() if l.strip()]
        for r in new:
            have[r["id"]] = r
        if cache:
            with open(cache, "a") as f:
                for r in new:
                    f.write(json.dumps(r) + "\n")
    res = {}
    for key, h in keyof.items():
        r = have[h]
        own = Sk(bytes.fromhex(r["sketch"]))
        alt = Sk(bytes.fromhex(r["sketch_alt"]))
        res[key] = Doc(int(r["simhash"], 16), r["chars"], r["mode"], own, alt, r["anchors"],
                       r["anchors_alt"], h)
    return res


class Sk:
    __slots__ = ("shift", "mode", "vals", "byshift")

    def __init__(self, b):
        self.shift, self.mode, n = b[1] & 0x7F, b[1] >> 7, b[2] | b[3] << 8
        self.vals = [int.from_bytes(b[8 + 4 * i: 12 + 4 * i], "little") for i in range(n)]
        self.byshift = {}

    def at(self, s):
        r = self.byshift.get(s)
        if r is None:
            r = self.byshift[s] = frozenset(v for v in self.vals if (v & 31) >= s)
        return r


class Doc:
    __slots__ = ("simhash", "chars", "mode", "sk", "anchors", "anchors_alt", "texthash")

    def __init__(self, simhash, chars, mode, own, alt, anchors, anchors_alt, texthash):
        self.simhash, self.chars, self.mode = simhash, chars, mode
        self.sk = {mode: own, 1 - mode: alt}
        self.anchors, self.anchors_alt, self.texthash = anchors, anchors_alt, texthash


def compare(q, d):
    """q a query (both modes), d a stored document (its own mode)."""
    qs, ds = q.sk[d.mode], d.sk[d.mode]
    s = max(qs.shift, ds.shift)
    a, b = qs.at(s), ds.at(s)
    sh = len(a & b)
    u = len(a) + len(b) - sh
    return (sh / u if u else 0.0, sh / len(a) if a else 0.0, sh / len(b) if b else 0.0, sh)


class Registry:
    def __init__(self, P):
        self.P = P
        self.docs = {}          # id -> (Doc, order)
        self.n = 0
        k = P.k
        self.nb = k + 1
        # k+1 contiguous blocks of the 64 bits: pigeonhole, exact for radius k
        sizes = [64 // self.nb + (1 if i < 64 % self.nb else 0) for i in range(self.nb)]
        self.blocks, off = [], 0
        for sz in sizes:
            self.blocks.append((off, (1 << sz) - 1)); off += sz
        self.tables = [collections.defaultdict(set) for _ in range(self.nb)]
        self.post = collections.defaultdict(list)

    def add(self, id_, d):
        self.docs[id_] = (d, self.n); self.n += 1
        for t, (off, mask) in enumerate(self.blocks):
            self.tables[t][(d.simhash >> off) & mask].add(id_)
        for a in set(d.anchors[: self.P.M]):
            self.post[a].append(id_)

    def remove(self, id_):
        d, _ = self.docs.pop(id_)
        for t, (off, mask) in enumerate(self.blocks):
            self.tables[t][(d.simhash >> off) & mask].discard(id_)
        for a in set(d.anchors[: self.P.M]):
            self.post[a].remove(id_)

    def candidates(self, q):
        P = self.P
        c = set()
        for t, (off, mask) in enumerate(self.blocks):
            for i in self.tables[t].get((q.simhash >> off) & mask, ()):
                if i not in c and bin(self.docs[i][0].simhash ^ q.simhash).count("1") <= P.k:
                    c.add(i)
        cnt = collections.Counter()
        for a in set(q.anchors[: P.Q]) | set(q.anchors_alt[: P.Q]):
            p = self.post.get(a)
            if p and len(p) <= P.cap:
                cnt.update(p)
        if cnt:
            best = sorted(cnt.items(), key=lambda kv: (-kv[1], self.docs[kv[0]][1]))[: P.V]
            c.update(i for i, n in best if n >= P.min_shared)
        return c

    def check(self, q):
        """-> list of (id, kind, R, C, CR) of verified matches, or None if refused."""
        P = self.P
        if q.chars < 300:
            return None
        out = []
        for i in self.candidates(q):
            d = self.docs[i][0]
            if d.texthash == q.texthash:
                out.append((i, "identical", 1.0, 1.0, 1.0)); continue
            R, C, CR, sh = compare(q, d)
            if sh == 0:
                continue
            if R >= P.R:
                out.append((i, "near_duplicate", R, C, CR))
            elif C >= P.C or CR >= P.CR:
                out.append((i, "partial_copy", R, C, CR))
        return out


def simulate(P, data, S, quiet=False):
    corpus, edited, nat, negs = data["corpus"], data["edited"], data["nat"], data["negs"]
    text = {d["id"]: d["text"] for d in corpus}
    lang = {d["id"]: d["lang"] for d in corpus}
    J = data["J"]
    res = {"negatives": collections.Counter(), "neg_n": collections.Counter()}
    # 1. negatives
    for p in negs:
        reg = Registry(P)
        reg.add("A", S["c:" + p["a"]])
        m = reg.check(S["c:" + p["b"]])
        res["neg_n"][p["tier"]] += 1
        if m is not None and any(x[0] == "A" for x in m):
            res["negatives"][p["tier"]] += 1
    # 2. corpus
    reg = Registry(P)
    order, registered, ans = {}, set(), {}
    for n, d in enumerate(corpus):
        q = S["c:" + d["id"]]
        m = reg.check(q)
        order[d["id"]] = n
        if m is None:
            continue
        ans[d["id"]] = m
        if not m:
            reg.add(d["id"], q); registered.add(d["id"])
    false_flags, contained = [], 0
    for i, m in ans.items():
        if not m:
            continue
        ms = [x[0] for x in m]
        if any(J.get((i, x), 0) >= 0.5 for x in ms):
            continue
        si = data["gt"].get(i)
        if si is None:
            si = data["gt"][i] = gt_shingles(text[i], lang[i])
        ok = False
        for x in ms:
            sx = data["gt"].get(x)
            if sx is None:
                sx = data["gt"][x] = gt_shingles(text[x], lang[i])
            if len(si & sx) >= 0.5 * len(si):
                ok = True; break
        if ok:
            contained += 1; continue
        false_flags.append((i, [(x[0], x[1], round(x[2], 3), round(x[3], 3), round(x[4], 3)) for x in m][:3]))
    nat_rows = collections.defaultdict(lambda: [0, 0])
    for p in nat:
        x, y = sorted((p["a"], p["b"]), key=lambda i: order.get(i, 1 << 30))
        if x not in registered or y not in ans:
            continue
        hit = any(z[0] == x for z in ans[y]); j = p["jaccard"]
        for name, ok in (("J>=0.9", j >= .9), ("J>=0.8", j >= .8), ("0.7-0.8", .7 <= j < .8), ("0.5-0.7", .5 <= j < .7)):
            if ok:
                for key in ((name, "all"), (name, lang[x])):
                    nat_rows[key][0] += hit; nat_rows[key][1] += 1
    # 3. edited
    rows = collections.defaultdict(lambda: [0, 0, 0])  # hit, n, refused
    for e in edited:
        if e["src"] not in registered:
            continue
        m = reg.check(S["e:" + e["id"]])
        hit = m is not None and any(x[0] == e["src"] for x in m)
        for key in ((e["kind"], e["level"], "all"), (e["kind"], e["level"], e["lang"])):
            rows[key][0] += hit; rows[key][1] += 1; rows[key][2] += m is None
    groups = [("format", lambda k, l: k == "format"),
              ("footer", lambda k, l: k == "format" and l == "footer"),
              ("all", lambda k, l: k == "format" and l == "all"),
              ("light1-5", lambda k, l: k == "light"),
              ("heavy10", lambda k, l: k == "heavy" and l == "10%"),
              ("heavy20", lambda k, l: k == "heavy" and l == "20%"),
              ("para", lambda k, l: k in ("para_cut", "para_move")),
              ("cut", lambda k, l: k == "para_cut"),
              ("trunc50", lambda k, l: k == "truncate"),
              ("trunc50_judged", None)]
    head = collections.OrderedDict()
    for lg in ("all", "zh", "en"):
        for name, sel in groups:
            h = n = r = 0
            for (k, l, g), (hh, nn, rr) in rows.items():
                if g == lg and (sel or (lambda k, l: k == "truncate"))(k, l):
                    h += hh; n += nn; r += rr
            if sel is None:
                n -= r
            head[(name, lg)] = 100.0 * h / n if n else float("nan")
        for name in ("J>=0.9", "J>=0.8"):
            h, n = nat_rows[(name, lg)]
            head[("nat" + name[1:], lg)] = 100.0 * h / n if n else float("nan")
    head[("fpr_neg", "all")] = 100.0 * sum(res["negatives"].values()) / max(1, sum(res["neg_n"].values()))
    head[("false_flags", "all")] = len(false_flags)
    head[("contained_flags", "all")] = contained
    return head, false_flags, rows, res


TARGETS = {"format": 99.0, "footer": 99.5, "all": 98.0, "light1-5": 99.9, "heavy10": 98.0,
           "para": 99.7, "trunc50_judged": 90.0, "nat>=0.9": 100.0, "nat>=0.8": 99.8}


def print_head(P, head, ff):
    names = ["format", "footer", "all", "light1-5", "heavy10", "heavy20", "para", "cut", "trunc50",
             "trunc50_judged", "nat>=0.9", "nat>=0.8"]
    print(f"params: {vars(P)}")
    print(f"{'row':16s} {'all':>7s} {'zh':>7s} {'en':>7s}  target")
    for n in names:
        t = TARGETS.get(n)
        ok = "" if t is None else ("ok" if head[(n, "all")] >= t else "MISS")
        print(f"{n:16s} {head[(n, 'all')]:7.2f} {head[(n, 'zh')]:7.2f} {head[(n, 'en')]:7.2f}  {t or ''} {ok}")
    print(f"fpr negatives {head[('fpr_neg', 'all')]:.2f} %   corpus false flags {head[('false_flags', 'all')]}"
          f" (+{head[('contained_flags', 'all')]} justified by containment)")
    for i, m in ff[:10]:
        print("   ff", i, m)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--neardup", default=os.path.join(ROOT, "build-sk", "server", "neardup"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "eval", "data"))
    ap.add_argument("--cache", default="/tmp/verdict_sim_cache.jsonl")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--Q", type=int, default=16)
    ap.add_argument("--cap", type=int, default=64)
    ap.add_argument("--V", type=int, default=32)
    ap.add_argument("--min-shared", dest="min_shared", type=int, default=1)
    ap.add_argument("--R", type=float, default=0.5)
    ap.add_argument("--C", type=float, default=0.6)
    ap.add_argument("--CR", type=float, default=2.0)
    ap.add_argument("--grid", help="JSON list of parameter overrides to run in turn")
    ap.add_argument("--json")
    a = ap.parse_args()
    d = a.data
    corpus = load(os.path.join(d, "corpus.jsonl"))
    edited = load(os.path.join(d, "edited.jsonl"))
    nat = load(os.path.join(d, "natural_pairs.jsonl"))
    negs = load(os.path.join(d, "negatives.jsonl"))
    J = {}
    for p in nat:
        J[(p["a"], p["b"])] = J[(p["b"], p["a"])] = p["jaccard"]
    items = [("c:" + x["id"], x["text"]) for x in corpus] + [("e:" + x["id"], x["text"]) for x in edited]
    S = sketch_all(a.neardup, items, a.cache)
    data = dict(corpus=corpus, edited=edited, nat=nat, negs=negs, J=J, gt={})
    runs = [{}] if not a.grid else json.loads(a.grid)
    allout = []
    for over in runs:
        P = argparse.Namespace(**{k: getattr(a, k) for k in ("k", "M", "Q", "cap", "V", "min_shared", "R", "C", "CR")})
        for k, v in over.items():
            setattr(P, k, v)
        t0 = time.time()
        head, ff, rows, res = simulate(P, data, S)
        print_head(P, head, ff)
        print(f"({time.time() - t0:.1f} s)\n", flush=True)
        allout.append({"params": vars(P), "head": {f"{k[0]}:{k[1]}": v for k, v in head.items()},
                       "false_flags": ff})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(allout, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
