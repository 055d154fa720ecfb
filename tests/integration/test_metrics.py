"""GET /metrics on a live server: `promtool check metrics` (Debian's
prometheus package) accepts the scrape with no complaint, and it carries
what an operator needs: requests by route and status, latency histograms,
index size, documents, registrations, bytes fingerprinted, storage commit
latency and build info, with values that match what was done.

Skipped (exit 77) only when promtool is not installed; CI installs it
(deploy/install-deps.sh --test)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, load_texts, parse_metrics  # noqa: E402

T = Runner("test_metrics")
TEXTS = load_texts()


def scrape(srv):
    status, hdrs, data = srv.request("GET", "/metrics")
    check(status == 200, "scrape: %s", status)
    check(hdrs.get("content-type", "").startswith("text/plain; version=0.0.4"),
          "content type %r", hdrs.get("content-type"))
    return data.decode("utf-8")


def promtool(text):
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics (exit %d):\n%s%s", p.returncode, p.stdout, p.stderr)


def families(text):
    """{name: type} from the # TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def check_histogram(m, name, labels=""):
    """Buckets are cumulative, end with +Inf equal to _count; returns count."""
    sel = ("{%s," % labels) if labels else "{"
    buckets = []
    for key, v in m.items():
        if key.startswith(name + "_bucket" + sel):
            le = re.search(r'le="([^"]+)"', key).group(1)
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    check(buckets, "no buckets of %s%s", name, sel)
    counts = [v for _, v in buckets]
    check(counts == sorted(counts), "%s buckets not cumulative: %r", name, buckets)
    suffix = "{%s}" % labels if labels else ""
    count = m[name + "_count" + suffix]
    check(buckets[-1][0] == float("inf") and buckets[-1][1] == count,
          "%s: +Inf %r != count %r", name, buckets[-1], count)
    check(name + "_sum" + suffix in m, "no %s_sum", name)
    return count


def exercise(srv):
    """Requests of every kind; returns the bytes of text fingerprinted."""
    fp_bytes = 0
    texts = [TEXTS["en1"], TEXTS["zh1"], TEXTS["en2"]]
    for i, t in enumerate(texts):
        body = {"id": "m-%d" % i, "text": t, "register": True}
        status, r = srv.json("POST", "/check-original", body)
        check(status == 200 and r["registered"], r)
        fp_bytes += len(t.encode())
    status, r = srv.json("POST", "/check-original", {"text": texts[0]})  # a duplicate
    check(status == 200 and r["verdict"] == "duplicate", r)
    fp_bytes += len(texts[0].encode())
    # A partial copy: the first half of en1 in a new article.
    half = texts[0][:len(texts[0]) // 2]
    partial = half[:half.rfind("\n")] + "\n\n" + TEXTS["en4"][:300]
    status, r = srv.json("POST", "/check-original", {"text": partial})
    check(status == 200 and r["verdict"] == "partial_copy", r)
    fp_bytes += len(partial.encode())
    status, _ = srv.json("POST", "/fingerprint", {"texts": ["alpha beta", "gamma"]})
    check(status == 200)
    fp_bytes += len("alpha beta") + len("gamma")
    status, _ = srv.json("POST", "/check-original", {"text": "too short"})
    check(status == 422)
    fp_bytes += len("too short")
    srv.json("GET", "/documents/m-0")
    srv.json("DELETE", "/documents/m-2")
    srv.json("GET", "/nowhere")
    srv.json("PUT", "/fingerprint", raw=b"{}")
    srv.json("POST", "/fingerprint", raw=b"{not json")
    return fp_bytes


@T.test
def promtool_accepts_a_live_scrape_with_the_store():
    with Server(threads=2) as srv:
        promtool(scrape(srv))  # before any traffic but the probes
        fp_bytes = exercise(srv)
        for path in ("/replica", "/audit", "/import"):
            status, _, _ = srv.request("PUT", path, b"")
            check(status == 405, "PUT %s: %s", path, status)
        text = scrape(srv)
        promtool(text)
        fam = families(text)
        m = parse_metrics(text)
        want = {
            "neardup_http_requests_total": "counter",
            "neardup_http_request_duration_seconds": "histogram",
            "neardup_index_entries": "gauge",
            "neardup_documents": "gauge",
            "neardup_registrations_total": "counter",
            "neardup_fingerprinted_bytes_total": "counter",
            "neardup_fingerprints_total": "counter",
            "neardup_store_commit_duration_seconds": "histogram",
            "neardup_store_commits_total": "counter",
            "neardup_build_info": "gauge",
            "process_resident_memory_bytes": "gauge",
            "process_start_time_seconds": "gauge",
        }
        for name, typ in want.items():
            check(fam.get(name) == typ, "%s: type %r, wanted %s", name, fam.get(name), typ)
        # Requests by route and status.
        for key in ('neardup_http_requests_total{route="/check-original",code="200"}',
                    'neardup_http_requests_total{route="/check-original",code="422"}',
                    'neardup_http_requests_total{route="/documents/{id}",code="200"}',
                    'neardup_http_requests_total{route="other",code="404"}',
                    'neardup_http_requests_total{route="/fingerprint",code="405"}',
                    'neardup_http_requests_total{route="/fingerprint",code="400"}'):
            check(m.get(key, 0) >= 1, "no %s", key)
        check(m['neardup_http_requests_total{route="/check-original",code="200"}'] == 5, m)
        # /replica, /audit and /import count under their own labels.
        for path in ("/replica", "/audit", "/import"):
            check(m.get('neardup_http_requests_total{route="%s",code="405"}' % path) == 1,
                  "%s: %r", path, m)
        n = check_histogram(m, "neardup_http_request_duration_seconds",
                            'route="/check-original"')
        check(n == 6, "check-original latency count %r", n)
        # Checks by verdict: the three registrations, the copy, the excerpt.
        verdicts = {v: m.get('neardup_checks_total{verdict="%s"}' % v)
                    for v in ("original", "duplicate", "partial_copy")}
        check(verdicts == {"original": 3, "duplicate": 1, "partial_copy": 1}, verdicts)
        # Index, documents, registrations, bytes fingerprinted.
        check(m["neardup_documents"] == 2 and m["neardup_index_entries"] == 2, m)
        check(m['neardup_registrations_total{result="ok"}'] == 3, m)
        check(m['neardup_deletions_total{result="ok"}'] == 1, m)
        check(m["neardup_fingerprinted_bytes_total"] == fp_bytes,
              "bytes fingerprinted %r, sent %d", m["neardup_fingerprinted_bytes_total"], fp_bytes)
        check(m["neardup_fingerprints_total"] == 8, m["neardup_fingerprints_total"])
        # Storage commits: the three registrations and the deletion.
        commits = check_histogram(m, "neardup_store_commit_duration_seconds")
        check(commits >= 1 and commits == m['neardup_store_commits_total{result="ok"}'],
              "commit latency count %r", commits)
        check(m["neardup_store_changes_total"] == 4, m["neardup_store_changes_total"])
        # Build info.
        info = [k for k in m if k.startswith("neardup_build_info{")]
        check(len(info) == 1 and m[info[0]] == 1, info)
        out = subprocess.run([srv.proc.args[0], "--version"], capture_output=True, text=True,
                             timeout=10).stdout.split()[-1]
        check('version="%s"' % out in info[0] and 'fingerprint="nd-simhash-2"' in info[0]
              and 'sketch="nd-sketch-2"' in info[0], "%s (neardupd --version: %s)", info[0], out)
        check(m["process_resident_memory_bytes"] > 1e6, m["process_resident_memory_bytes"])
        check(m["process_open_fds"] > 3, m["process_open_fds"])


@T.test
def promtool_accepts_in_memory_and_draining():
    with Server(["--drain-delay", "1"], in_memory=True, threads=1) as srv:
        exercise(srv)
        text = scrape(srv)
        promtool(text)
        check("neardup_store_commit_duration_seconds" not in text, "store metrics in memory")
        check(parse_metrics(text)["neardup_in_memory"] == 1, "in_memory gauge")
        srv.signal(15)
        # The signal reaches the main loop asynchronously: scrape (still
        # served during the 1 s drain delay) until the drain shows.
        deadline = time.monotonic() + 0.8
        while True:
            text = scrape(srv)
            m = parse_metrics(text)
            if m["neardup_draining"] == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        promtool(text)
        check(m["neardup_draining"] == 1 and m["neardup_ready"] == 0, m)
        check(srv.wait(timeout=15) == 0, "exit code after the drain")


if __name__ == "__main__":
    if shutil.which("promtool") is None:
        print("SKIP: promtool is not installed (Debian package prometheus; "
              "deploy/install-deps.sh --test installs it)")
        sys.exit(77)
    T.run()
