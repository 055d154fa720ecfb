"""Texts crafted against the sketch's hash tables (audit 2026-12-07 G01).

The sketcher's set of distinct shingles and the passages' table were
linear-probing tables whose cell is (h ^ h >> 32) & (size - 1), h the
public, unseeded XXH3 of a shingle: a CJK text whose shingles all fall into
a few cells (tests/hashflood_gen, ~16 tries a character) made every
insertion walk the whole cluster, O(n^2): an anonymous POST /compare of
351 KB cost 7.7 s. Both now give the table up for a radix sort when its
probes pass a budget that random hashes never reach.

- compare: POST /compare of a crafted 300 KB text (text_a against a short
  text_b, and against itself: the passages' table over text_b), best of 3,
  within 3 times a random text of the same size plus 0.2 s (before: ~6 s
  against ~0.05 s).
- registered: a document registered with a crafted tail whose shingles are
  never anchors, then an anonymous check of its head: it is listed, and its
  kept text paired; within 3 times the same for a random tail plus 0.2 s
  (before: ~1.4 s a check). The check of head + crafted tail likewise.
- words: the fingerprint's feature table (cell h & (size - 1), h the XXH3
  of a word) gives itself up the same way: POST /fingerprint, /compare and
  /check-original of ~1 MiB of words crafted to fall into its first 4096
  cells, within 3 times random words plus 0.2 s (before: 15 s, 6.4 s and
  11.4 s).
"""

import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check  # noqa: E402

T = Runner("test_hashflood")
GEN = os.environ.get("ND_HASHFLOOD_GEN", "build/tests/hashflood_gen")
N = 100000  # crafted characters of /compare (300 KB)
N_TAIL = 60000  # of a registered document's tail (180 KB: within a check's read budget)


def gen(n, window, hi=False, seed=1):
    """n + 4 ideographs; window 0: random, else crafted (tests/hashflood.h)."""
    args = [GEN, str(n), str(window)] + (["hi"] if hi else []) + [str(seed)]
    out = subprocess.run(args, capture_output=True, timeout=120, check=True)
    return out.stdout.decode()


def best_of(srv, path, body, rounds=3):
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        status, r = srv.json("POST", path, body, timeout=600)
        dt = time.perf_counter() - t0
        check(status == 200, "%s: %s %r", path, status, r)
        best = dt if best is None or dt < best else best
    return best, r


@T.test
def compare(srv):
    crafted, plain = gen(N, 4096, seed=3), gen(N, 0, seed=3)
    check(len(crafted) == len(plain) == N + 4, "lengths")
    short = gen(400, 0, seed=5)
    for what, b_of in (("text_b short", lambda t: short), ("text_b itself", lambda t: t)):
        tp, rp = best_of(srv, "/compare", {"text_a": plain, "text_b": b_of(plain)})
        tc, rc = best_of(srv, "/compare", {"text_a": crafted, "text_b": b_of(crafted)})
        print("   /compare %d KB, %s: random %.3f s, crafted %.3f s"
              % (len(crafted.encode()) // 1024, what, tp, tc), flush=True)
        check(tc <= 3 * tp + 0.2, "%s: crafted %.3f s, random %.3f s", what, tc, tp)
        if b_of(plain) is not short:
            check(rc["kind"] == "identical" and len(rc["passages"]) == 1, "%r", rc)


@T.test
def registered(srv):
    rnd = random.Random(7)
    times = {}
    for kind, window in (("random", 0), ("crafted", 4096)):
        head = gen(2500, 0, seed=rnd.randrange(1, 1 << 60))
        tail = gen(N_TAIL, window, hi=True, seed=11)
        status, r = srv.json("POST", "/check-original",
                             {"id": "doc-" + kind, "account": "mallory", "text": head + "\n" + tail,
                              "register": True}, timeout=600)
        check(status == 200 and r["registered"], "%s %r", status, r)
        t_list, r = best_of(srv, "/check-original", {"text": head})
        check([m["id"] for m in r["matches"]] == ["doc-" + kind] and r["matches"][0].get("passages"),
              "%s: %r", kind, r)
        t_tail, _ = best_of(srv, "/check-original", {"text": head + "\n" + tail})
        times[kind] = (t_list, t_tail)
        print("   %s tail of %d KB: check of the head %.3f s, of the whole %.3f s"
              % (kind, len(tail.encode()) // 1024, t_list, t_tail), flush=True)
    for k, what in enumerate(("check of the head", "check of the whole")):
        check(times["crafted"][k] <= 3 * times["random"][k] + 0.2, "%s: crafted %.3f s, random %.3f s",
              what, times["crafted"][k], times["random"][k])


@T.test
def words(srv):
    def gen_words(window):
        args = [GEN, "words", "120000", str(window), "5"]
        return subprocess.run(args, capture_output=True, timeout=120, check=True).stdout.decode()
    crafted, plain = gen_words(4096), gen_words(0)
    for path, body in (("/fingerprint", lambda t: {"text": t}),
                       ("/compare", lambda t: {"text_a": t, "text_b": "a short text b"}),
                       ("/check-original", lambda t: {"text": t})):
        tp, _ = best_of(srv, path, body(plain))
        tc, _ = best_of(srv, path, body(crafted))
        print("   %s, %d KB of words: random %.3f s, crafted %.3f s"
              % (path, len(crafted) // 1024, tp, tc), flush=True)
        check(tc <= 3 * tp + 0.2, "%s: crafted %.3f s, random %.3f s", path, tc, tp)


if __name__ == "__main__":
    T.run(fresh=lambda: Server())
