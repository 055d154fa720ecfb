"""GET /replica: the digest costs the event loops nothing, and it is an
operator's read (audit F01).

- probes_not_delayed: a store of ND_REPLICA_PROBE_N records (default
  300,000, written by store_tool fill); 16 clients (another process) loop
  on GET /replica while /healthz is asked every 20 ms: its p99 stays under
  100 ms. (Before, each /replica scanned every record on a worker's loop:
  /healthz waited behind the scans for seconds.)
- token_guards_replica: with a token configured, GET and HEAD /replica
  without it answer 401 (the probes and /metrics stay open); with it, 200.
- digest_kept_across_restart: the digest follows registrations, policy
  changes and deletions, and the one a restart computes from the store is
  the one kept while running.
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HEX16, Runner, Server, check, expect_error, load_texts,  # noqa: E402
                     tool_path)

N = int(os.environ.get("ND_REPLICA_PROBE_N", "300000"))
CLIENTS = 16
LOAD_SECONDS = 4.0
P99_LIMIT_MS = 100.0
TOKEN = "replica-probe-token-0123456789abcdef"


def load_main(port, clients, seconds):
    """Run as a separate process (its own GIL): clients threads loop on GET
    /replica for seconds; prints "requests=N errors=E"."""
    import http.client
    until = time.monotonic() + seconds
    counts = [0, 0]
    lock = threading.Lock()

    def loop():
        conn = None
        while time.monotonic() < until:
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/replica")
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn = None
            with lock:
                counts[0 if ok else 1] += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    print("requests=%d errors=%d" % (counts[0], counts[1]), flush=True)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def healthz_latencies(srv, seconds, interval=0.02):
    """/healthz every interval seconds for seconds, each on a new
    connection (as a probe does); returns the latencies in ms."""
    lat = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            status, _, _ = srv.request("GET", "/healthz", timeout=30)
        except OSError:
            status = None
        lat.append((time.monotonic() - t0) * 1000.0)
        check(status == 200, "/healthz answered %s", status)
        time.sleep(interval)
    return lat


runner = Runner("replica_probe")


@runner.test
def probes_not_delayed():
    tmp = tempfile.mkdtemp(prefix="nd-replica-probe-")
    data = os.path.join(tmp, "data")
    tool = tool_path("ND_STORE_TOOL", ("tests", "store_tool"))
    subprocess.run([tool, "fill", data, str(N)], check=True, stdout=subprocess.DEVNULL,
                   timeout=300)
    with Server(data_dir=data) as srv:
        status, body = srv.json("GET", "/replica")
        check(status == 200 and body.get("documents") == N, "%s %r", status, body)
        load = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--load",
                                 str(srv.port), str(CLIENTS), str(LOAD_SECONDS)],
                                stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)  # the clients are looping
            lat = healthz_latencies(srv, LOAD_SECONDS - 0.6)
            out, _ = load.communicate(timeout=LOAD_SECONDS + 180)
        finally:
            if load.poll() is None:
                load.kill()
                load.wait()
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        print("  %d records; /healthz while %d clients loop on /replica: %d probes, "
              "p50 %.1f ms, p99 %.1f ms, max %.1f ms; load: %s"
              % (N, CLIENTS, len(lat), p50, p99, max(lat), out.strip()))
        check(p99 < P99_LIMIT_MS, "/healthz p99 %.1f ms (max %.1f ms) while clients loop on "
              "/replica: over %.0f ms", p99, max(lat), P99_LIMIT_MS)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)


@runner.test
def token_guards_replica():
    with Server(in_memory=True, env={"NEARDUP_TOKEN": TOKEN}) as srv:
        status, body = srv.json("GET", "/replica")
        expect_error(status, body, 401, "unauthorized")
        status, headers, _ = srv.request("HEAD", "/replica")
        check(status == 401, "HEAD /replica without the token: %s", status)
        check(headers.get("www-authenticate", "").startswith("Bearer"), headers)
        status, body = srv.json("GET", "/replica",
                                headers={"Authorization": "Bearer " + TOKEN + "x"})
        expect_error(status, body, 401, "unauthorized")
        status, body = srv.json("GET", "/replica", headers={"Authorization": "Bearer " + TOKEN})
        check(status == 200 and body.get("replicated") is False and body.get("documents") == 0
              and HEX16.match(body.get("digest", "")), "%s %r", status, body)
        for path in ("/healthz", "/readyz", "/metrics"):
            status, _, _ = srv.request("GET", path)
            check(status == 200, "%s without a token: %s", path, status)


@runner.test
def digest_kept_across_restart():
    t = load_texts()
    texts = [t["en1"], t["zh1"], t["en3"]]
    auth = {"Authorization": "Bearer " + TOKEN}
    with Server(env={"NEARDUP_TOKEN": TOKEN}) as srv:
        seen = []

        def state():
            status, body = srv.json("GET", "/replica", headers=auth)
            check(status == 200, "%s %r", status, body)
            return body["documents"], body["digest"]

        seen.append(state())
        for i, text in enumerate(texts):
            status, body = srv.json("POST", "/check-original",
                                    {"id": "doc-%d" % i, "text": text, "register": True,
                                     "account": "acct-%d" % i}, headers=auth)
            check(status == 200 and body.get("registered"), "%s %r", status, body)
            seen.append(state())
        status, body = srv.json("PUT", "/documents/doc-1/policy", {"reprint": "forbid"},
                                headers=auth)
        check(status == 200, "%s %r", status, body)
        seen.append(state())
        status, _, _ = srv.request("DELETE", "/documents/doc-0", headers=auth)
        check(status == 200, "DELETE: %s", status)
        seen.append(state())
        print("  documents, digest: %s" % seen)
        check([n for n, _ in seen] == [0, 1, 2, 3, 3, 2], "counts %s", seen)
        check(len({d for _, d in seen}) == len(seen), "a change left the digest as it was: %s",
              seen)
        srv.restart()
        check(state() == seen[-1], "after a restart %s, before %s", state(), seen[-1])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--load":
        load_main(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        sys.exit(0)
    runner.run()
