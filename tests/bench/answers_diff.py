#!/usr/bin/env python3
"""Sends the same scripted requests (about 20 of every kind: probes,
fingerprint, checks, documents, policies, revoke/restore, copies, audit,
import, replica, errors) to two neardupd builds and prints every answer whose
status, headers or body differ, after masking what differs from run to run
(Date, times, cursors made of times). For refactors that must not change
behaviour:

    python3 tests/bench/answers_diff.py OLD/neardupd NEW/neardupd

Exit 0 when every answer matches, 1 otherwise. Both servers run on
127.0.0.1 with --in-memory and the same token file.
"""
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402

OPERATOR = "op-" + "o" * 29
ALICE = "alice-" + "a" * 26
VOLATILE_HEADERS = {"date", "connection", "keep-alive", "x-request-id"}
TIME = re.compile(rb'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z')
NUMBER_FIELDS = re.compile(rb'"(took_us|uptime_s|seconds|elapsed_ms|lines_per_s|ms)":\s*[0-9.e+-]+')
CURSOR = re.compile(rb'"(next|next_cursor|cursor|after|digest)":\s*"[^"]*"')  # times inside


def texts():
    base = harness.load_texts()  # name -> text
    return [t for _, t in sorted(base.items()) if len(t) >= 400][:24]


def script():
    """(method, path, body, token) requests, in order."""
    t = texts()
    reqs = []
    add = reqs.append
    for p in ("/healthz", "/readyz", "/nope", "/healthz?x=1"):
        for m in ("GET", "HEAD", "POST", "DELETE"):
            add((m, p, None, None))
    for i, x in enumerate(t[:20]):
        add(("POST", "/fingerprint", {"text": x}, None))
        add(("POST", "/fingerprint", {"text": x[: 50 + i]}, None))
    add(("POST", "/fingerprint", {"texts": t[:5]}, None))
    for bad in (b"", b"{", b"[]", b'{"text": 5}', b'{"text": "\xff"}', b'{"text": ""}'):
        add(("POST", "/fingerprint", bad, None))
        add(("POST", "/check-original", bad, None))
    for i, x in enumerate(t[:20]):
        add(("POST", "/check-original", {"id": "d-%d" % i, "text": x, "account": "alice",
                                         "register": True}, OPERATOR))
        add(("POST", "/check-original", {"text": x}, None))
        add(("POST", "/check-original", {"text": x + "\n转载请注明出处"}, None))
        add(("POST", "/check-original", {"text": x[: len(x) // 2]}, None))
        add(("POST", "/check-original", {"text": t[(i + 1) % len(t)] + "\n\n" + x[: len(x) // 2]}, None))
        add(("POST", "/check-original", {"id": "c-%d" % i, "account": "bob", "text": x}, OPERATOR))
    for i in range(20):
        d = "/documents/d-%d" % i
        add(("GET", d, None, None))
        add(("HEAD", d, None, None))
        add(("GET", d + "/copies", None, None))
        add(("PATCH", d + "/policy", {"reprint": "forbid"}, ALICE))
        add(("PUT", d + "/policy", {"reprint": "allow", "whitelist": [{"account": "carol"}]}, OPERATOR))
        add(("POST", d + "/revoke", {"reason": "r%d" % i}, OPERATOR))
        add(("POST", d + "/restore", {}, OPERATOR))
        add(("POST", d + "/revoke", {}, None))
    for p in ("/documents/missing", "/documents/", "/documents/%00", "/documents/x/nope"):
        add(("GET", p, None, None))
    for q in ("", "?limit=2", "?document=d-1", "?limit=0", "?document=d-7&limit=3"):
        add(("GET", "/audit" + q, None, OPERATOR))
        add(("GET", "/audit" + q, None, None))
    lines = "\n".join(json.dumps({"id": "imp-%d" % i, "text": x,
                                  "registered_at": "2020-01-0%dT00:00:00Z" % (i + 1)})
                      for i, x in enumerate(t[6:10])).encode()
    add(("POST", "/import", lines, OPERATOR))
    add(("POST", "/import", lines, None))
    add(("GET", "/replica", None, OPERATOR))
    add(("GET", "/replica", None, None))
    add(("DELETE", "/documents/d-5", None, OPERATOR))
    add(("DELETE", "/documents/d-5", None, OPERATOR))
    add(("GET", "/metrics", None, None))
    return reqs


def mask(body):
    body = TIME.sub(b"T", body)
    body = NUMBER_FIELDS.sub(lambda m: b'"' + m.group(1) + b'":N', body)
    return CURSOR.sub(lambda m: b'"' + m.group(1) + b'":"C"', body)


def answers(binary, tokens_file):
    os.environ["NEARDUPD"] = binary
    out = []
    with harness.Server(["--token-file", tokens_file], in_memory=True) as srv:
        for method, path, body, token in script():
            hdrs = {"Authorization": "Bearer " + token} if token else {}
            if isinstance(body, dict):
                body = json.dumps(body).encode()
            if body is not None:
                hdrs["Content-Type"] = "application/json"
            st, h, data = srv.request(method, path, body, hdrs)
            hs = sorted((k, v) for k, v in h.items() if k not in VOLATILE_HEADERS
                        and k != "content-length")
            if path == "/metrics":
                data = b"(metrics body not compared)"
            out.append(((method, path), st, hs, mask(data)))
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tmp = tempfile.mkdtemp(prefix="answers-diff-")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("operator %s operator\nalice-cms %s accounts=alice\n" % (OPERATOR, ALICE))
    os.chmod(tokens, 0o600)
    a, b = (answers(os.path.abspath(x), tokens) for x in sys.argv[1:3])
    diffs = 0
    for x, y in zip(a, b):
        if x != y:
            diffs += 1
            print("DIFF %s %s\n  old: %s %s %s\n  new: %s %s %s"
                  % (x[0][0], x[0][1], x[1], x[2], x[3][:300], y[1], y[2], y[3][:300]))
    print("answers: %d compared, %d differ" % (len(a), diffs))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
