"""Numbers printed the same everywhere: a figure of a
copy detected is the same bytes in the /check-original answer, on a
GET /events page and in the webhook body that tells of it (0.958, never
0.95799999999999996 where jansson re-wrote it); a registration's meta
keeps its reals short (GET /documents/{id}, the matches of a check); the
summary of POST /import gives its seconds as a short real. The bytes are
read raw, never through a JSON parser (which would hide the difference).
The receiver is a plain http.server thread here that keeps each body."""

import json
import os
import re
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Runner, Server, check, edit, free_port, load_texts  # noqa: E402

T = Runner("test_numbers")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-numbers-")
TOKEN = "numbers-operator-0123456789abcdef"
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    f.write("op %s operator\n" % TOKEN)
os.chmod(TOKEN_FILE, 0o600)
AUTH = {"Authorization": "Bearer " + TOKEN}
# A real written with more digits than it needs (jansson's "%.17g").
LONG_REAL = re.compile(rb"\d\.\d{12,}")


class Bodies:
    """A webhook receiver on loopback that keeps every body it gets, raw."""

    def __init__(self):
        self.bodies = []
        self.lock = threading.Lock()
        outer = self

        class Hook(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.port = free_port()
        self.srv = ThreadingHTTPServer((HOST, self.port), Hook)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def wait(self, cond, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = [b for b in self.bodies if cond(b)]
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError("no webhook body within %d s: %r" % (timeout, self.bodies))

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def figure(raw, name):
    """The bytes of the first "name": number in raw."""
    m = re.search(rb'"' + name.encode() + rb'":(-?[0-9][0-9.eE+-]*)', raw)
    check(m, "no %s in %r", name, raw[:400])
    return m.group(1)


def long_in_17g(fig):
    """True when "%.17g" (jansson) writes the figure with more digits."""
    return len(b"%.17g" % float(fig)) > len(fig)


def ask(srv, path, obj, method="POST"):
    status, _, data = srv.request(method, path, json.dumps(obj).encode() if obj else None,
                                  dict(AUTH, **({"Content-Type": "application/json"}
                                                if obj else {})))
    check(status == 200, "%s %s: %s %r", method, path, status, data[:300])
    return data


@T.test
def a_detection_the_same_everywhere():
    rcv = Bodies()
    hooks = os.path.join(TMP, "hooks.json")
    with open(hooks, "w") as f:
        json.dump({"subscriptions": [{"name": "all", "url": "http://%s:%d/hook" % (HOST, rcv.port),
                                      "secret": "whsec-numbers-0123456789"}]}, f)
    try:
        with Server(["--token-file", TOKEN_FILE, "--webhooks", hooks]) as srv:
            ask(srv, "/check-original", {"id": "orig", "account": "alice", "register": True,
                                         "text": TEXTS["en1"], "meta": {"score": 0.958}})
            # A copy whose figures jansson would write long (most 4-decimal
            # figures are; try edits until one is, so the test bites).
            for seed in range(2, 40):
                copy = "copy-%d" % seed
                raw = ask(srv, "/check-original", {"id": copy, "account": "bob",
                                                   "text": edit(TEXTS["en1"], 4 + seed, seed)})
                res, con = figure(raw, "resemblance"), figure(raw, "containment")
                if long_in_17g(res) or long_in_17g(con):
                    break
            else:
                raise AssertionError("no edit gave a figure jansson writes long")
            check(not LONG_REAL.search(raw), "the answer: %r", raw)
            check(b'"score":0.958' in raw, "the match's meta: %r", raw)
            want = b'"resemblance":%s,"containment":%s' % (res, con)
            # GET /events: the page as sent.
            status, _, page = srv.request("GET", "/events?type=copy.detected&limit=100",
                                          headers=AUTH)
            check(status == 200, "GET /events: %s %r", status, page)
            mine = [e for e in json.loads(page)["events"] if e["data"]["copy"]["id"] == copy]
            check(len(mine) == 1, "the event of %s: %r", copy, page)
            check(want in page, "GET /events writes %s otherwise: %r", want, page)
            check(not LONG_REAL.search(page), "a long real on the page: %r", page)
            # The webhook body of the same event.
            bodies = rcv.wait(lambda b: copy.encode() in b)
            check(want in bodies[0], "the webhook body writes %s otherwise: %r", want, bodies[0])
            check(not LONG_REAL.search(bodies[0]), "a long real in the body: %r", bodies[0])
            # The stored meta: as it was sent.
            doc = ask(srv, "/documents/orig", None, method="GET")
            check(b'"score":0.958' in doc and not LONG_REAL.search(doc), "the meta: %r", doc)
            # POST /import: its seconds a short real too (no trailing zeros).
            line = json.dumps({"id": "imp", "account": "carol", "text": TEXTS["zh1"]}) + "\n"
            status, _, data = srv.request("POST", "/import", line.encode(),
                                          dict(AUTH, **{"Content-Type": "application/x-ndjson"}))
            check(status == 200, "import: %s %r", status, data)
            sec = figure(data, "seconds")
            check(re.fullmatch(rb"(0|[1-9][0-9]*)\.(0|[0-9]{0,2}[1-9])", sec),
                  "seconds %r", sec)
    finally:
        rcv.close()


if __name__ == "__main__":
    T.run()
