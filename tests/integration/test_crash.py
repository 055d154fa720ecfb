"""Crash safety and start-up: SIGKILL in the middle of registrations loses
nothing that was acknowledged; the restarted server listens at once, answers
/readyz 503 "loading" until the index is rebuilt (progress logged), then
finds the same near duplicates as before."""

import http.client
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, edit, load_texts  # noqa: E402

T = Runner("test_crash")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]


def hammer(srv, seconds, acked, stop):
    def client(i):
        conn = srv.connect(timeout=10)
        n = 0
        while not stop.is_set():
            doc = "k%d-%d" % (i, n)
            text = edit(BASES[(i + n) % len(BASES)], 5, n) + "\n#%d-%d" % (i, n)
            try:
                conn.request("POST", "/check-original",
                             body=json.dumps({"id": doc, "text": text, "register": True, "k": 0}),
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = json.loads(resp.read())
            except (OSError, http.client.HTTPException, ValueError):
                return
            if resp.status == 200 and body["registered"]:
                acked.append(doc)
            n += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    return threads


@T.test
def sigkill_keeps_acknowledged(srv):
    acked = []
    stop = threading.Event()
    threads = hammer(srv, 2.0, acked, stop)
    srv.proc.send_signal(signal.SIGKILL)
    srv.wait(timeout=10)
    stop.set()
    for t in threads:
        t.join(10)
    check(len(acked) > 50, "too few registrations: %d" % len(acked))
    srv.restart()
    for doc in acked:
        status, body = srv.json("GET", "/documents/" + doc)
        check(status == 200, "acknowledged %s lost after SIGKILL" % doc)


@T.test
def restart_loads_index(srv):
    n = 300
    expect = {}
    conn = srv.connect()
    for i in range(n):
        text = edit(BASES[i % len(BASES)], 30, i) + "\n#%d" % i
        status, body = srv.json("POST", "/check-original",
                                {"id": "d%d" % i, "text": text, "register": True, "k": 0},
                                conn=conn)
        check(status == 200, body)
        if body["registered"]:
            expect["d%d" % i] = (text, body["simhash"])
    conn.close()
    check(srv.stop() == 0)
    srv.restart(wait_ready=False)
    statuses = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status, body = srv.json("GET", "/readyz", timeout=5)
        except OSError:
            continue
        statuses.append((status, (body or {}).get("error", {}).get("code")))
        if status == 200:
            break
    check(statuses and statuses[-1][0] == 200, statuses[-5:])
    check(all(s == (503, "loading") for s in statuses[:-1]), statuses[:5])
    msgs = [r for r in srv.log_records() if r.get("msg") in ("listening", "loading documents",
                                                             "ready")]
    order = [r["msg"] for r in msgs]
    check(order[0] == "listening" and order[-1] == "ready", order)
    progress = [r for r in msgs if r["msg"] == "loading documents"]
    check(progress and progress[-1]["loaded"] == progress[-1]["total"] == len(expect), progress)
    check(msgs[-1]["documents"] == len(expect) and msgs[-1]["stale"] == 0, msgs[-1])
    # Same answers as before the restart.
    for doc, (text, simhash) in list(expect.items())[:40]:
        status, body = srv.json("POST", "/check-original", {"text": text, "k": 0})
        check(status == 200 and doc in [m["id"] for m in body["matches"]], (doc, body))
        status, body = srv.json("POST", "/check-original", {"id": doc, "text": text,
                                                             "register": True, "k": 0})
        check(body["original"] and body["registered"] and body["simhash"] == simhash, body)


@T.test
def second_server_on_same_data_refused(srv):
    other = Server(data_dir=srv.data_dir, wait_ready=False)
    try:
        other.start()
        code = other.wait(timeout=10)
        raise AssertionError("second server started (exit %s)" % code)
    except RuntimeError as e:
        check("exited with 1" in str(e), str(e))
        check("cannot open the store" in str(e), str(e))
    finally:
        other.cleanup()
    status, _ = srv.json("GET", "/readyz")
    check(status == 200)


def main():
    T.run(fresh=Server)


if __name__ == "__main__":
    main()
