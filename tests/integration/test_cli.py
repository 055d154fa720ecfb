#!/usr/bin/env python3
"""The `neardup` command-line tool, run as a real process."""
import json
import os
import subprocess
import sys
import tempfile
import time

NEARDUP = os.environ.get("NEARDUP", "build/server/neardup")
ROOT = os.environ.get("ND_SOURCE_ROOT", ".")
results = {"passed": 0, "failed": 0}


def check(cond, what):
    if cond:
        results["passed"] += 1
    else:
        results["failed"] += 1
        print("FAIL:", what, file=sys.stderr)


def run(args, data=b"", timeout=60):
    return subprocess.run([NEARDUP] + args, input=data, capture_output=True, timeout=timeout)


def vectors():
    with open(os.path.join(ROOT, "proto", "vectors.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_single_text():
    vs = [v for v in vectors() if "text" in v]
    for v in vs[:20]:
        r = run(["fingerprint"], v["text"].encode())
        check(r.returncode == 0 and r.stdout.decode().strip() == v["simhash"],
              f"stdin {v['name']}: {r.stdout!r} {r.stderr!r}")
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(vs[8]["text"].encode())
    try:
        r = run(["fingerprint", f.name])
        check(r.returncode == 0 and r.stdout.decode() == vs[8]["simhash"] + "\n", f"FILE: {r.stdout!r}")
    finally:
        os.unlink(f.name)
    r = run(["fingerprint", "/nonexistent/file"])
    check(r.returncode == 1 and b"cannot open" in r.stderr, f"missing file: {r.stderr!r}")
    r = run(["fingerprint"], b"abc\xff")
    check(r.returncode == 1 and b"UTF-8" in r.stderr and r.stdout == b"", f"invalid: {r.stderr!r}")


def test_jsonl_batch():
    vs = [v for v in vectors() if "text" in v]
    lines = [json.dumps({"id": i, "text": v["text"]}) for i, v in enumerate(vs)]
    lines += ["not json", json.dumps({"id": "x"}), json.dumps({"id": "y", "text": 5}),
              json.dumps([1, 2]), "", json.dumps({"id": {"nested": True}, "text": "ok text"})]
    r = run(["fingerprint", "--jsonl"], ("\n".join(lines) + "\n").encode())
    check(r.returncode == 0, f"exit {r.returncode}: {r.stderr!r}")
    out = [json.loads(line) for line in r.stdout.decode().splitlines()]
    check(len(out) == len(vs) + 5, f"{len(out)} output lines for {len(vs) + 5} non-blank inputs")
    for i, v in enumerate(vs):
        o = out[i]
        check(o.get("id") == i and o.get("simhash") == v["simhash"] and o.get("chars") == v["chars"]
              and o.get("features") == v["features"], f"jsonl {v['name']}: {o}")
    bad = out[len(vs):len(vs) + 4]
    check(all("error" in o and "simhash" not in o for o in bad), f"bad lines: {bad}")
    check(bad[1]["id"] == "x" and bad[2]["id"] == "y" and bad[0]["id"] is None, f"ids kept: {bad}")
    check(out[-1].get("id") == {"nested": True} and len(out[-1].get("simhash", "")) == 16, f"{out[-1]}")


def test_jsonl_flushes_each_line():
    p = subprocess.Popen([NEARDUP, "fingerprint", "--jsonl"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for i in range(3):
            p.stdin.write((json.dumps({"id": i, "text": f"line number {i}"}) + "\n").encode())
            p.stdin.flush()
            t0 = time.monotonic()
            line = p.stdout.readline()  # must arrive while stdin is still open
            check(json.loads(line).get("id") == i and time.monotonic() - t0 < 10, f"line {i}: {line!r}")
    finally:
        p.stdin.close()
        p.wait(timeout=10)
    check(p.returncode == 0, f"exit {p.returncode}")


def test_commands():
    r = run(["version"])
    check(r.returncode == 0 and b"nd-simhash-" in r.stdout, f"version: {r.stdout!r}")
    r = run(["--help"])
    check(r.returncode == 0 and b"fingerprint" in r.stdout and b"backup" in r.stdout, "help")
    r = run(["frobnicate"])
    check(r.returncode == 2 and b"unknown command" in r.stderr, f"unknown: {r.stderr!r}")
    r = run([])
    check(r.returncode == 2, "no command")
    r = run(["fingerprint", "--bogus"])
    check(r.returncode == 2, "unknown option")
    r = run(["backup"])
    check(r.returncode == 2 and b"DEST" in r.stderr, f"backup without DEST: {r.stderr!r}")


def test_scorer_protocol():
    """The evaluation scorer drives the CLI exactly as the README says."""
    score = os.path.join(ROOT, "..", "shared", "eval", "score.py")
    if not os.path.exists(score):
        print("skip: ../shared/eval not present")
        return
    r = subprocess.run([sys.executable, score, "--cmd-batch", f"{NEARDUP} fingerprint --jsonl",
                        "--max-sources", "15", "--kmax", "3"], capture_output=True, timeout=600,
                       cwd=os.path.dirname(score))
    text = r.stdout.decode()
    check(r.returncode == 0 and "HEADLINE" in text and "(errors: 0)" in text,
          f"score.py: {r.returncode} {text[-500:]} {r.stderr.decode()[-500:]}")



def test_compare():
    """`neardup compare` makes each text's question as the server does: the
    distance is that of the texts' fingerprints (the vectors'), a text
    compared with itself is identical, and a text that is not UTF-8 is
    named."""
    vs = [v for v in vectors() if "simhash" in v and v.get("chars", 0) >= 20][:12]
    check(len(vs) >= 4, "vectors with text")
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, v in enumerate(vs):
            paths.append(os.path.join(d, "t%d" % i))
            with open(paths[-1], "wb") as f:
                f.write(v["text"].encode())
        for i in range(len(vs) - 1):
            r = run(["compare", paths[i], paths[i + 1]])
            check(r.returncode == 0, f"compare: {r.stderr!r}")
            if r.returncode != 0:
                continue
            out = json.loads(r.stdout)
            want = bin(int(vs[i]["simhash"], 16) ^ int(vs[i + 1]["simhash"], 16)).count("1")
            check(out["distance"] == want, f"distance {out['distance']}, fingerprints {want}")
        r = run(["compare", paths[0], paths[0]])
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        check(out.get("distance") == 0 and out.get("kind") == "identical"
              and out.get("resemblance") == 1.0, f"itself: {r.stdout!r}")
        # What each text hid, as the server's answer says it: a copy with a
        # Cyrillic look-alike in every English word and a zero-width space.
        plain = "Original articles are checked before they are published " * 8
        hidden = "Оriginal аrticles are chеcked before they are pub\u200blished " * 8
        pair = [os.path.join(d, "plain"), os.path.join(d, "hidden")]
        for path, text in zip(pair, (plain, hidden)):
            with open(path, "wb") as f:
                f.write(text.encode())
        r = run(["compare"] + pair)
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        check(out.get("integrity_a") == {"invisible": 0, "lookalike": 0, "annotation": 0,
                                         "reordered": 0, "traditional": 0, "script": None}
              and out.get("integrity_b") == {"invisible": 8, "lookalike": 24, "annotation": 0,
                                             "reordered": 0, "traditional": 0, "script": None}
              and out.get("kind") == "near_duplicate" and out.get("resemblance") == 1.0,
              f"integrity: {r.stdout!r}")
        # A Chinese text and its copy with a reading in brackets after its
        # characters: read alike, the readings counted.
        zh = "原创文章的作者是谁，我们需要知道。这篇文章讲的是软件开发的历史与文化。" * 10
        noisy = ("原(yuán)创(chuàng)文(wén)章(zhāng)的(de)作者是谁，我们需要知道。"
                 "这篇文章讲的是软(ruǎn)件开(kāi)发的历史与文化。") * 10
        pair = [os.path.join(d, "zh"), os.path.join(d, "noisy")]
        for path, text in zip(pair, (zh, noisy)):
            with open(path, "wb") as f:
                f.write(text.encode())
        r = run(["compare"] + pair)
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        check(out.get("integrity_b", {}).get("annotation") == 70
              and out.get("integrity_a", {}).get("annotation") == 0
              and out.get("distance") == 0 and out.get("resemblance") == 1.0,
              f"annotation: {r.stdout!r}")
        bad = os.path.join(d, "bad")
        with open(bad, "wb") as f:
            f.write(b"abc \xff def")
        r = run(["compare", paths[0], bad])
        check(r.returncode == 1 and bad.encode() in r.stderr and b"UTF-8" in r.stderr,
              f"not UTF-8: {r.returncode} {r.stderr!r}")


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
    print(f"cli: {results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)
