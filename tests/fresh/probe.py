#!/usr/bin/env python3
"""Checks a neardupd from outside, over 127.0.0.1 (python3 stdlib only): the
fresh-machine stage (tests/fresh/run.sh) runs it on the host against servers
in a fresh root, a container and a systemd container.

  probe.py wait PORT SECONDS        /healthz answers 200 within SECONDS
  probe.py healthz PORT             GET /healthz is 200
  probe.py readyz PORT [STATUS]     GET /readyz is STATUS (200)
  probe.py register PORT ID         POST /check-original registers an original
                                    article under ID; a near-duplicate of it is
                                    then not original and matches ID
  probe.py find PORT ID             GET /documents/ID is the article, and a
                                    near-duplicate of it matches ID

Exit 0 when the check holds; otherwise one line on stderr says why, exit 1."""

import http.client
import json
import sys
import time

ARTICLE = (
    "A fresh machine has nothing on it but what the installer brought: no compiler "
    "headers, no build tools, no test programs. The first command of the README "
    "must bring everything the server needs and then build and start it, and this "
    "article is what the fresh-machine check registers to prove that the server "
    "it built stores and finds documents. It is long enough to judge, written "
    "once, and its near-duplicate below changes only a few of its words."
)
NEAR = ARTICLE.replace("fresh machine", "new machine").replace("proves", "shows")


def request(port, method, path, body=None, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return r.status, parsed
    finally:
        conn.close()


def fail(msg, *args):
    print("probe: " + (msg % args if args else msg), file=sys.stderr)
    sys.exit(1)


def expect(status, body, want, what):
    if status != want:
        fail("%s: status %d (wanted %d): %r", what, status, want, body)


def near_matches(port, doc_id):
    status, body = request(port, "POST", "/check-original",
                           {"id": doc_id + "-near", "text": NEAR, "register": False})
    expect(status, body, 200, "POST /check-original (near-duplicate)")
    ids = [m.get("id") for m in body.get("matches", [])]
    if body.get("original") is not False or doc_id not in ids:
        fail("the near-duplicate of %s is not caught: %r", doc_id, body)


def main(argv):
    if len(argv) < 3:
        fail("usage: probe.py wait|healthz|readyz|register|find PORT [ARG]")
    cmd, port = argv[1], int(argv[2])
    if cmd == "wait":
        deadline = time.monotonic() + float(argv[3])
        last = None
        while time.monotonic() < deadline:
            try:
                status, body = request(port, "GET", "/healthz", timeout=2)
                if status == 200:
                    return
                last = "status %d" % status
            except OSError as e:
                last = str(e)
            time.sleep(0.5)
        fail("no /healthz 200 on 127.0.0.1:%d within %ss (last: %s)", port, argv[3], last)
    elif cmd == "healthz":
        status, body = request(port, "GET", "/healthz")
        expect(status, body, 200, "GET /healthz")
    elif cmd == "readyz":
        want = int(argv[3]) if len(argv) > 3 else 200
        status, body = request(port, "GET", "/readyz")
        expect(status, body, want, "GET /readyz")
    elif cmd == "register":
        doc_id = argv[3]
        status, body = request(port, "POST", "/check-original",
                               {"id": doc_id, "text": ARTICLE, "register": True,
                                "meta": {"by": "tests/fresh"}})
        expect(status, body, 200, "POST /check-original")
        if body.get("original") is not True or body.get("registered") is not True:
            fail("not registered as original: %r", body)
        if len(body.get("simhash", "")) != 16:
            fail("simhash: %r", body)
        near_matches(port, doc_id)
    elif cmd == "find":
        doc_id = argv[3]
        status, body = request(port, "GET", "/documents/" + doc_id)
        expect(status, body, 200, "GET /documents/" + doc_id)
        if body.get("id") != doc_id:
            fail("GET /documents/%s: %r", doc_id, body)
        near_matches(port, doc_id)
    else:
        fail("unknown check %r", cmd)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (OSError, http.client.HTTPException) as e:
        fail("%s: %s", " ".join(sys.argv[1:]), e)
