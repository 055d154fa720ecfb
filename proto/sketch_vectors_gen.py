#!/usr/bin/env python3
"""Writes proto/sketch_vectors.jsonl: test vectors for ND_SKETCH_VERSION.

Usage: python3 proto/sketch_vectors_gen.py build/server/neardup > proto/sketch_vectors.jsonl

Run it only when the algorithm changes (and the version is bumped): the vectors
pin the outputs, and tests/test_sketch.c checks every one bit for bit.
Inputs: every text of proto/vectors.jsonl (the fingerprint vectors: scripts,
normalization, markup, URLs, invalid UTF-8) plus long texts (sampled sketches,
shift > 0) and pairs. Lines:
  {"name", "text" | "text_hex", "sketch": hex of nd_sketch_encode(),
   "anchors": [first 32 anchors]}            or {"name", "text_hex", "error": "EILSEQ"}
  {"name", "pair": true, "a", "b", "shared", "a_n", "b_n", "shift",
   "passages": [[start, end], ...]}           (a submitted, b registered)
"""
import json, os, random, subprocess, sys, tempfile

neardup = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
singles = []
for l in open(os.path.join(here, "vectors.jsonl"), encoding="utf-8"):
    v = json.loads(l)
    singles.append({k: v[k] for k in ("name", "text", "text_hex") if k in v})

rng = random.Random(12)
en_words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
            "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
han = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
long_en = " ".join(rng.choice(en_words) + str(rng.randrange(50)) for _ in range(1500))
long_zh = "".join(rng.choice(han) + ("，" if rng.random() < 0.1 else "") for _ in range(3000))
mixed = "".join((rng.choice(han) if rng.random() < 0.6 else " " + rng.choice(en_words) + " ") for _ in range(800))
for name, t in (("long en (sampled)", long_en), ("long zh (sampled)", long_zh), ("mixed zh/en", mixed)):
    singles.append({"name": name, "text": t})


def run_sketch(items):
    inp = ""
    for i, v in enumerate(items):
        text = v["text"] if "text" in v else None
        if text is None:
            continue
        inp += json.dumps({"id": i, "text": text}) + "\n"
    out = subprocess.run([neardup, "sketch", "--jsonl", "--anchors", "32"], input=inp.encode(),
                         stdout=subprocess.PIPE, check=True).stdout.decode()
    return {r["id"]: r for r in map(json.loads, out.splitlines())}


res = run_sketch(singles)
for i, v in enumerate(singles):
    o = dict(v)
    if "text" in v:
        r = res[i]
        o.update(sketch=r["sketch"], anchors=r["anchors"])
    else:
        # text_hex inputs are the invalid UTF-8 ones: compare via a file
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(bytes.fromhex(v["text_hex"]))
        p = subprocess.run([neardup, "compare", f.name, f.name], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        os.unlink(f.name)
        if p.returncode == 0:
            continue
        o["error"] = "EILSEQ"
    print(json.dumps(o, ensure_ascii=False))

en_para = " ".join(rng.choice(en_words) + str(rng.randrange(9)) for _ in range(120))
zh_para = "".join(rng.choice(han) for _ in range(300))
pairs = [
    ("excerpt en: first half", en_para[: len(en_para) // 2], en_para),
    ("excerpt en reversed roles", en_para, en_para[: len(en_para) // 2]),
    ("zh copy with a footer", zh_para + "\n\n转载请注明出处：某某博客 https://example.com/p/1", zh_para),
    ("zh paragraph inside a longer text", "".join(rng.choice(han) for _ in range(200)) + zh_para[:150]
     + "".join(rng.choice(han) for _ in range(200)), zh_para),
    ("long en vs its first third", long_en[: len(long_en) // 3], long_en),
    ("long zh edited", long_zh[:4000].replace(long_zh[100], "改"), long_zh),
    ("unrelated", en_para, zh_para),
]
for name, a, b in pairs:
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a"), os.path.join(d, "b")
        open(pa, "w", encoding="utf-8").write(a)
        open(pb, "w", encoding="utf-8").write(b)
        r = json.loads(subprocess.run([neardup, "compare", pa, pb], stdout=subprocess.PIPE, check=True).stdout)
    print(json.dumps({"name": name, "pair": True, "a": a, "b": b, "shared": r["shared"], "a_n": r["sampled_a"],
                      "b_n": r["sampled_b"], "shift": r["shift"],
                      "passages": [[p["start"], p["end"]] for p in r["passages"]]}, ensure_ascii=False))
