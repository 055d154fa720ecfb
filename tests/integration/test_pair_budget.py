"""Passages within a read budget (audit 2026-12-07 G02).

A check pairs its listed matches with their kept texts (their passages on
both sides), and POST /compare with id_b pairs its text with one: both read
and re-shingle registered texts that a short request does not pay for. Each
request may read 16 times its own bytes plus 256 KiB of kept text in all
(server/registry/pair.h); a match over that carries "passages_omitted":
"read_budget" instead of "passages", and /compare answers 409
source_too_large.

- big_sources: one account registers 15 texts of ~1 MiB (a passage P and a
  repeated filler that packs to almost nothing) and one short text with P.
  An anonymous check of P (~500 bytes) lists all 16: the short one with its
  passages, the large ones with passages_omitted; the verdict is the
  registry's as before (not original). 30 such checks cost the server's CPU
  (utime + stime from /proc) within 10 times 30 unrelated checks plus 20 ms
  a check (before: ~140 ms a check, release build). /compare of P with a
  large one answers 409 source_too_large, with the short one 200.
- invisible_bytes: texts whose ~1 MiB are invisible characters (dropped by
  the normalizer: a few hundred characters after it) are found over budget
  once read; the first read spends the budget, the others are not read.
- budget_grows: a 400 KB source is over the budget of a 500-byte check but
  within that of an 11 KB one (the budget grows with the request).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, expect_error, word_article as article  # noqa: E402

T = Runner("test_pair_budget")

BUDGET_FACTOR, BUDGET_BASE = 16, 256 * 1024  # server/registry/pair.h



P = article(7)


def register(srv, doc_id, text, account="mallory"):
    status, r = srv.json("POST", "/check-original",
                         {"id": doc_id, "account": account, "text": text, "register": True},
                         timeout=120)
    check(status == 200 and r["registered"], "%s: %s %r", doc_id, status, r)


def cpu_s(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def checks_cpu(srv, text, n):
    """The server's CPU seconds for n anonymous checks of text."""
    c0 = cpu_s(srv.proc.pid)
    for _ in range(n):
        status, r = srv.json("POST", "/check-original", {"text": text}, timeout=120)
        check(status == 200, "%s %r", status, r)
    return cpu_s(srv.proc.pid) - c0


@T.test
def big_sources(srv):
    filler = ("x y " * 262144)[:1000000 - len(P) - 8]
    register(srv, "short", P + "\nthe end")
    for k in range(15):
        register(srv, "big-%d" % k, P + "\n" + str(k) + " " + filler)
    # The cost: a check of P against as many unrelated checks of its size.
    other = article(8)
    checks_cpu(srv, P, 3)
    checks_cpu(srv, other, 3)
    n = 30
    cpu_p = checks_cpu(srv, P, n)
    cpu_o = checks_cpu(srv, other, n)
    print("   %d checks of P (%d bytes, 16 matches): %.3f s of CPU; %d unrelated: %.3f s"
          % (n, len(P), cpu_p, n, cpu_o), flush=True)
    check(cpu_p <= 10 * cpu_o + 0.02 * n,
          "checks of P cost %.3f s of CPU, unrelated ones %.3f s: large kept texts read",
          cpu_p, cpu_o)
    status, r = srv.json("POST", "/check-original", {"text": P})
    check(status == 200, "%s %r", status, r)
    check(not r["original"] and r["verdict"] == "duplicate", "verdict %r", r)
    ids = {m["id"]: m for m in r["matches"]}
    check(len(ids) == 16, "matches %r", sorted(ids))
    short = ids["short"]
    check(short.get("passages") and "passages_omitted" not in short, "short: %r", short)
    p = short["passages"][0]
    check(p["start"] == 0 and p["source_start"] == 0, "short's passage %r", p)
    for k in range(15):
        m = ids["big-%d" % k]
        check(m.get("passages_omitted") == "read_budget" and "passages" not in m,
              "big-%d: %r", k, m)
    # /compare with id_b: the same budget.
    status, r = srv.json("POST", "/compare", {"text_a": P, "id_b": "big-0"})
    expect_error(status, r, 409, "source_too_large")
    check(r["error"]["id"] == "big-0", "%r", r)
    status, r = srv.json("POST", "/compare", {"text_a": P, "id_b": "short"})
    check(status == 200 and r["passages"], "%s %r", status, r)


@T.test
def invisible_bytes(srv):
    # ~1 MiB each, a few hundred characters after the normalizer: read
    # before their bytes are known, then over the budget.
    for k in range(4):
        register(srv, "inv-%d" % k, P + "\u200b" * 330000 + " end %d" % k)
    status, r = srv.json("POST", "/check-original", {"text": P})
    check(status == 200 and not r["original"], "%s %r", status, r)
    check(len(r["matches"]) == 4, "matches %r", r["matches"])
    for m in r["matches"]:
        check(m.get("passages_omitted") == "read_budget" and "passages" not in m, "%r", m)
    status, r = srv.json("POST", "/compare", {"text_a": P, "id_b": "inv-0"})
    expect_error(status, r, 409, "source_too_large")


@T.test
def budget_grows(srv):
    filler = "x y " * 100000
    register(srv, "s", P + "\n" + filler)
    small = P
    large = P + "\n" + "x y " * 2700
    check(len(small.encode()) * BUDGET_FACTOR + BUDGET_BASE < len(P) + 400001
          <= len(large.encode()) * BUDGET_FACTOR + BUDGET_BASE, "sizes")
    status, r = srv.json("POST", "/check-original", {"text": small})
    check(status == 200 and len(r["matches"]) == 1, "%s %r", status, r)
    check(r["matches"][0].get("passages_omitted") == "read_budget", "%r", r["matches"][0])
    status, r = srv.json("POST", "/check-original", {"text": large})
    check(status == 200 and len(r["matches"]) == 1, "%s %r", status, r)
    m = r["matches"][0]
    check(m.get("passages") and "passages_omitted" not in m, "%r", m)
    status, r = srv.json("POST", "/compare", {"text_a": small, "id_b": "s"})
    expect_error(status, r, 409, "source_too_large")
    status, r = srv.json("POST", "/compare", {"text_a": large, "id_b": "s"})
    check(status == 200 and r["passages"], "%s %r", status, r)


if __name__ == "__main__":
    T.run(fresh=lambda: Server())
