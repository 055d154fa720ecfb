#!/usr/bin/env python3
"""HTTP benchmark of neardupd with wrk, next to two ceilings measured in the
same run: tests/bench/minimal_evhttp (evhttp answering a fixed 200 with the
same threads and accept strategy) and a static 200 from nginx.

    python3 tests/bench/bench_http.py [--build build] [--duration 10]
        [--connections 64] [--wrk-threads 2] [--threads N] [--quick]
        [--only min-reuseport,on-reuseport] [--compare OTHER/neardupd]

Scenarios (each on a fresh process, loopback only, bounded by --duration):
  /healthz             minimal_evhttp, nginx, neardupd (reuseport and shared)
  /healthz, Connection: close   accept-bound: reuseport vs shared
  /check-original      ~2 KB Chinese articles from ../shared/eval (or the
                       shipped test texts), register off and register on
                       (durable: the store fsyncs each group commit), the
                       latter also with one worker thread (wrk runs on the
                       same cores); prints durable registrations/s
  register on, loadgen the same register-on requests from tests/bench/loadgen
                       (one write and one read per request, no Lua): wrk
                       spends ~23 us of the two shared cores per request,
                       loadgen ~13, so the server keeps more of the machine.
                       Both clients' CPU per request is printed.
  --webhook            off-reuseport and on-reuseport again with one webhook
                       subscription delivering to a minimal_evhttp (+hook)
  minimal, POST bodies minimal_evhttp sent the register-off requests (the
                       same 2 KB bodies and path): the two then differ only
                       by the server's own work (key min-post-reuseport).
Every scenario runs --rounds times, interleaved (so that a noisy neighbour
hurts all of them alike); the median round is reported with its p50 and p99
latency and the server's CPU time per request (user + system, from /proc:
unlike requests/s it does not depend on how much CPU wrk and the neighbours
took), and the ratios to the minimal evhttp server by both measures. With
--compare PATH, every neardupd scenario also runs with that other binary
(key suffix "@other", e.g. a build before a change), in the same rounds
right after the same scenario, and the ratios are printed for both. Needs wrk and (for the nginx line) nginx: on Debian
`apt-get install wrk nginx-light`. Exits 0 (a benchmark, not a test) unless
a server fails to start."""

import argparse
import gzip
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED_CORPUS = os.path.join(ROOT, "..", "shared", "eval", "data", "corpus.jsonl.gz")
USE_SHARED = True  # False (--no-shared): only the shipped test texts, as without ../shared


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(url, timeout=30.0, want=200):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == want:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("no answer from " + url)


# ---- articles ----

def load_articles(limit=400):
    path = SHARED_CORPUS
    out = []
    if USE_SHARED and os.path.exists(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                n = len(d["text"].encode())
                if d["lang"] == "zh" and 1500 <= n <= 2600:
                    out.append(d["text"])
                    if len(out) >= limit:
                        break
        source = "shared/eval corpus (zh, 1.5-2.6 KB)"
    if not out:
        tdir = os.path.join(ROOT, "tests", "integration", "texts")
        out = [open(os.path.join(tdir, n), encoding="utf-8").read()
               for n in sorted(os.listdir(tdir)) if n.startswith("zh")]
        source = "tests/integration/texts (zh)"
    return out, source


def lua_str(s):
    eq = "=" * 4
    assert "]" + eq + "]" not in s
    return "[" + eq + "[" + s + "]" + eq + "]"


def load_paragraphs(articles, limit=3000):
    """Paragraphs (>= 160 characters, distinct; ~408 bytes on average, as
    the 150-character paragraphs of the 400 articles were) for the
    register-on texts:
    from every Chinese article of the corpus when it is there, else from
    the given articles. A large pool keeps near-duplicates among the random
    combinations rare (with the 300 paragraphs of 400 articles, ~7 % of the
    requests were not originals), so that register-on measures writes."""
    path = SHARED_CORPUS
    texts = articles
    if USE_SHARED and os.path.exists(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts = [d["text"] for d in map(json.loads, f) if d["lang"] == "zh"]
    seen, out = set(), []
    for a in texts:
        for p in a.split("\n"):
            if len(p) >= 160 and p not in seen:
                seen.add(p)
                out.append(p)
                if len(out) >= limit:
                    return out
    return out


def write_lua(tmp, articles):
    """check_off.lua: cycles the articles, no registration. check_on.lua:
    each request a new text (four random paragraphs from load_paragraphs())
    under a new id, register true: almost all originals, so writes."""
    bodies = [json.dumps({"text": a, "k": 3}, ensure_ascii=False) for a in articles]
    off = ["bodies = {" + ",\n".join(lua_str(b) for b in bodies) + "}",
           "wrk.method = 'POST'",
           "wrk.headers['Content-Type'] = 'application/json'",
           "local i = 0",
           "request = function()",
           "  i = i + 1",
           "  return wrk.format(nil, nil, nil, bodies[(i % #bodies) + 1])",
           "end"]
    paras = [json.dumps(p, ensure_ascii=False)[1:-1] for p in load_paragraphs(articles)]
    on = ["paras = {" + ",\n".join(lua_str(p) for p in paras) + "}",
          "local counter = 1",
          "local threads = {}",
          "setup = function(thread) thread:set('tid', counter); counter = counter + 1 end",
          "init = function(args) math.randomseed(tid * 7919 + os.time()); n = 0 end",
          "wrk.method = 'POST'",
          "wrk.headers['Content-Type'] = 'application/json'",
          "request = function()",
          "  n = n + 1",
          "  local a, b, c = math.random(#paras), math.random(#paras), math.random(#paras)",
          "  local body = '{\"id\":\"b' .. tid .. '-' .. n .. '-' .. math.random(1000000000) ..",
          "    '\",\"register\":true,\"k\":3,\"text\":\"' .. paras[a] .. '\\\\n' .. paras[b] ..",
          "    '\\\\n' .. paras[c] .. '\\\\n' .. paras[(a + b) % #paras + 1] .. '\"}'",
          "  return wrk.format(nil, nil, nil, body)",
          "end"]
    for name, lines in (("check_off.lua", off), ("check_on.lua", on), ("paragraphs.txt", paras)):
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    mean = sum(len(b.encode()) for b in bodies) / len(bodies)
    return mean, len(paras)


# ---- servers ----

class Proc:
    def __init__(self, cmd, log, cwd=None):
        self.log = open(log, "wb")
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, cwd=cwd,
                                  stdin=subprocess.DEVNULL)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def start_minimal(binary, threads, accept, tmp):
    proc = Proc([binary, "--port", "0", "--threads", str(threads), "--accept", accept],
                os.path.join(tmp, "minimal.log"))
    line = proc.p.stdout.readline().decode()
    m = re.match(r"listening (\d+)", line)
    if not m:
        proc.stop()
        raise RuntimeError("minimal_evhttp did not start: %r" % line)
    return proc, int(m.group(1))


def start_neardupd(binary, threads, accept, tmp, extra=()):
    data = tempfile.mkdtemp(prefix="data-", dir=tmp)
    log = os.path.join(tmp, "neardupd-%d.log" % time.monotonic_ns())
    proc = Proc([binary, "--listen", "127.0.0.1:0", "--threads", str(threads), "--accept",
                 accept, "--data", data] + list(extra), log)
    deadline = time.monotonic() + 30
    port = None
    while port is None and time.monotonic() < deadline:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if '"msg":"listening"' in line:
                    port = json.loads(line)["port"]
        if proc.p.poll() is not None:
            raise RuntimeError("neardupd exited: " + open(log).read())
        time.sleep(0.05)
    wait_http("http://127.0.0.1:%d/readyz" % port)
    return proc, port


def start_nginx(threads, tmp):
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if not nginx:
        return None, None
    port = free_port()
    ndir = tempfile.mkdtemp(prefix="nginx-", dir=tmp)
    conf = os.path.join(ndir, "nginx.conf")
    user = "user root;\n" if os.geteuid() == 0 else ""
    with open(conf, "w") as f:
        f.write(f"""{user}worker_processes {threads};
daemon off;
pid {ndir}/nginx.pid;
error_log {ndir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {ndir}/body;
  proxy_temp_path {ndir}/proxy;
  fastcgi_temp_path {ndir}/fastcgi;
  uwsgi_temp_path {ndir}/uwsgi;
  scgi_temp_path {ndir}/scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port} reuseport;
    location / {{
      default_type application/json;
      return 200 '{{"status":"ok"}}\\n';
    }}
  }}
}}
""")
    proc = Proc([nginx, "-c", conf, "-p", ndir], os.path.join(ndir, "stderr.log"))
    wait_http("http://127.0.0.1:%d/healthz" % port)
    return proc, port


def cpu_seconds(pid):
    """User + system CPU time of pid and its child processes (nginx workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        pids += [int(x) for x in out.stdout.split()]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / tick


# ---- wrk ----

def parse_latency(s):
    m = re.match(r"([\d.]+)(us|ms|s)", s)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v if m.group(2) == "ms" else v * 1000


def client_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loadgen(binary, port, args, paragraphs):
    """tests/bench/loadgen: the register-on requests of check_on.lua, sent by
    a client that costs the shared cores less CPU than wrk's Lua."""
    cmd = [binary, "--port", str(port), "--paragraphs", paragraphs, "--connections",
           str(args.connections), "--threads", str(args.loadgen_threads), "--duration",
           str(args.duration)]
    c0 = client_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60)
    if out.returncode != 0:
        raise RuntimeError("loadgen failed: " + out.stderr.strip())
    d = json.loads(out.stdout)
    good = sum(v for k, v in d["status"].items() if k.startswith("2") or k.startswith("3"))
    return {"rps": d["rps"], "p50": d["p50_ms"], "p99": d["p99_ms"],
            "non2xx": d["requests"] - good, "sockerr": d["errors"],
            "client_us": (client_cpu() - c0) * 1e6 / max(1, d["requests"])}


def wrk(port, path, args, script=None, headers=(), duration=None):
    cmd = ["wrk", "-t", str(args.wrk_threads), "-c", str(args.connections), "-d",
           "%ds" % (duration or args.duration), "--latency", "--timeout", "10s"]
    for h in headers:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    cmd.append("http://127.0.0.1:%d%s" % (port, path))
    c0 = client_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=(duration or
                                                                        args.duration) + 60)
    text = out.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    p50 = parse_latency(re.search(r"\s50%\s+(\S+)", text).group(1))
    p99 = parse_latency(re.search(r"\s99%\s+(\S+)", text).group(1))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    bad = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errs = sum(int(x) for x in m.groups()) if m else 0
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": bad, "sockerr": errs,
            "client_us": (client_cpu() - c0) * 1e6 / max(1.0, rps * (duration or args.duration))}


LOADGEN = "loadgen"   # scenario "script" meaning: requests from tests/bench/loadgen


def scenarios(args, tmp, off, on):
    """(label, server, accept, extra args, path, wrk script, headers, key)."""
    close = ["Connection: close"]
    out = []
    accepts = ("reuseport",) if args.quick else ("reuseport", "shared")
    for accept in accepts:
        out.append(("minimal_evhttp %s /" % accept, "minimal", accept, (), "/", None, (),
                    "min-" + accept))
        if not args.quick:
            out.append(("minimal_evhttp %s / (Connection: close)" % accept, "minimal", accept,
                        (), "/", None, close, "min-close-" + accept))
    # The register-off requests, to the minimal server (see the docstring).
    out.append(("minimal_evhttp reuseport POST /check-original bodies", "minimal", "reuseport",
                (), "/check-original", off, (), "min-post-reuseport"))
    out.append(("nginx static 200", "nginx", None, (), "/", None, (), "nginx"))
    for accept in accepts:
        out.append(("neardupd %s /healthz" % accept, "neardupd", accept, (), "/healthz", None,
                    (), "healthz-" + accept))
        if not args.quick:
            out.append(("neardupd %s /healthz (Connection: close)" % accept, "neardupd", accept,
                        (), "/healthz", None, close, "healthz-close-" + accept))
        out.append(("neardupd %s /check-original register=off" % accept, "neardupd", accept,
                    (), "/check-original", off, (), "off-" + accept))
    out.append(("neardupd reuseport /check-original register=on", "neardupd", "reuseport", (),
                "/check-original", on, (), "on-reuseport"))
    # wrk shares the machine: one worker thread leaves it the other core.
    out.append(("neardupd reuseport /check-original register=on, 1 worker",
                "neardupd", "reuseport", ("--threads", "1"), "/check-original", on, (),
                "on-reuseport-1"))
    # The same requests from loadgen, which leaves the server more of the cores.
    out.append(("neardupd reuseport /check-original register=on, loadgen", "neardupd",
                "reuseport", (), "/check-original", LOADGEN, (), "on-lg"))
    out.append(("neardupd reuseport /check-original register=on, 1 worker, loadgen",
                "neardupd", "reuseport", ("--threads", "1"), "/check-original", LOADGEN, (),
                "on-lg-1"))
    if not args.quick:
        out.append(("neardupd reuseport /check-original register=on --no-sync", "neardupd",
                    "reuseport", ("--no-sync",), "/check-original", on, (), "on-nosync"))
    return out


def run(args):
    tmp = tempfile.mkdtemp(prefix="bench-http-")
    build = os.path.join(ROOT, args.build)
    neardupd = os.environ.get("NEARDUPD", os.path.join(build, "server", "neardupd"))
    minimal = os.environ.get("MINIMAL_EVHTTP", os.path.join(build, "tests", "bench",
                                                            "minimal_evhttp"))
    lg_bin = os.environ.get("LOADGEN", os.path.join(build, "tests", "bench", "loadgen"))
    for b in (neardupd, minimal, lg_bin):
        if not os.path.exists(b):
            sys.exit("missing %s: build first (ninja -C %s)" % (b, args.build))
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    threads = args.threads or os.cpu_count()
    articles, source = load_articles()
    mean_body, _ = write_lua(tmp, articles)
    off = os.path.join(tmp, "check_off.lua")
    on = os.path.join(tmp, "check_on.lua")
    runs = {}
    notes = {}
    plan = scenarios(args, tmp, off, on)
    if args.only:
        keep = set(args.only.split(","))
        plan = [p for p in plan if p[-1] in keep]
    hook_rcv = None
    if args.webhook:
        # One subscription, to minimal_evhttp (a fixed 200, one thread): the
        # cost of delivering every event the scenario writes, next to the
        # same scenario without --webhooks (key suffix "+hook").
        hook_rcv, hook_port = start_minimal(minimal, 1, "reuseport", tmp)
        hooks = os.path.join(tmp, "webhooks.json")
        with open(hooks, "w") as f:
            json.dump({"subscriptions": [{"name": "bench", "secret": "bench-secret-0123456789",
                                          "url": "http://127.0.0.1:%d/hook" % hook_port}]}, f)
        with_hooks = []
        for p in plan:
            with_hooks.append(p)
            if p[1] == "neardupd" and p[-1] in ("off-reuseport", "on-reuseport"):
                with_hooks.append((p[0] + " +webhook",) + p[1:3] + (p[3] + ("--webhooks", hooks),)
                                  + p[4:-1] + (p[-1] + "+hook",))
        plan = with_hooks
    if args.compare:
        both = []
        for p in plan:
            both.append(p)
            if p[1] == "neardupd" and not p[-1].endswith("+hook"):
                both.append((p[0] + " [other]", "neardupd-other") + p[2:-1] + (p[-1] + "@other",))
        plan = both
    print("# wrk -t%d -c%d -d%ds, %d interleaved rounds, medians; server threads %d; %d cores; "
          "load average %.1f; articles: %d from %s, mean body %.0f bytes" % (
              args.wrk_threads, args.connections, args.duration, args.rounds, threads,
              os.cpu_count(), os.getloadavg()[0], len(articles), source, mean_body),
          flush=True)
    try:
        for rnd in range(args.rounds):
            for label, server, accept, extra, path, script, headers, key in plan:
                if server == "minimal":
                    proc, port = start_minimal(minimal, threads, accept, tmp)
                elif server == "nginx":
                    proc, port = start_nginx(threads, tmp)
                    if not proc:
                        continue
                else:
                    proc, port = start_neardupd(args.compare if server == "neardupd-other"
                                                else neardupd, threads, accept, tmp, extra)
                try:
                    if script not in (on, LOADGEN):
                        wrk(port, path, args, script=script, headers=headers, duration=1)
                    cpu0 = cpu_seconds(proc.p.pid)
                    if script == LOADGEN:
                        res = loadgen(lg_bin, port, args, os.path.join(tmp, "paragraphs.txt"))
                    else:
                        res = wrk(port, path, args, script=script, headers=headers)
                    cpu = cpu_seconds(proc.p.pid) - cpu0
                    res["cpu_us"] = cpu * 1e6 / max(1.0, res["rps"] * args.duration)
                    if server.startswith("neardupd") and script in (on, LOADGEN):
                        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port) as r:
                            m = r.read().decode()
                        reg = re.search(r'registrations_total\{result="ok"\} (\d+)', m)
                        dup = re.search(r'checks_total\{verdict="duplicate"\} (\d+)', m)
                        notes[key] = "registered %s, not original %s" % (
                            reg.group(1) if reg else "?", dup.group(1) if dup else "?")
                        hook = re.search(r'webhook_delivered_total\{[^}]*\} (\d+)', m)
                        if hook:
                            notes[key] += ", webhook deliveries %s" % hook.group(1)
                        res["reg_per_s"] = int(reg.group(1)) / args.duration if reg else 0.0
                finally:
                    proc.stop()
                runs.setdefault(key, []).append(res)
                print("  round %d  %-52s %9.0f req/s  %6.1f us CPU/req  client %5.1f us/req" % (
                    rnd + 1, label, res["rps"], res["cpu_us"], res["client_us"]), flush=True)
    finally:
        if hook_rcv:
            hook_rcv.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {}
    for key, rs in runs.items():
        rs = sorted(rs, key=lambda r: r["rps"])
        med[key] = rs[len(rs) // 2]
    print("\n%-56s %10s %9s %9s %8s %9s  %s" % ("scenario (median of rounds)", "req/s",
                                                 "p50 ms", "p99 ms", "CPU us", "client us",
                                                 "all rounds req/s"))
    for label, server, accept, extra, path, script, headers, key in plan:
        if key not in med:
            print("%-56s (nginx not installed: apt-get install nginx-light)" % label)
            continue
        r = med[key]
        bad = ("  non-2xx %d" % r["non2xx"]) if r["non2xx"] else ""
        cpu = sorted(x["cpu_us"] for x in runs[key])[len(runs[key]) // 2]
        ccpu = sorted(x["client_us"] for x in runs[key])[len(runs[key]) // 2]
        print("%-56s %10.0f %9.3f %9.3f %8.1f %9.1f  %s%s%s" % (
            label, r["rps"], r["p50"], r["p99"], cpu, ccpu,
            " ".join("%.0f" % x["rps"] for x in runs[key]), bad,
            ("  (" + notes[key] + ")") if key in notes else ""))

    def cpu_of(key):
        return sorted(x["cpu_us"] for x in runs[key])[len(runs[key]) // 2]

    def ratio(a, b, what):
        if a in med and b in med:
            print("%-58s %.2f x  (%.0f / %.0f req/s); by server CPU per request %.2f x "
                  "(%.1f / %.1f us)" % (what, med[a]["rps"] / med[b]["rps"], med[a]["rps"],
                                        med[b]["rps"], cpu_of(b) / cpu_of(a), cpu_of(a),
                                        cpu_of(b)))

    print()
    for key, what in (("on-reuseport", "%d worker threads, wrk" % threads),
                      ("on-reuseport-1", "1 worker thread, wrk"),
                      ("on-lg", "%d worker threads, loadgen" % threads),
                      ("on-lg-1", "1 worker thread, loadgen")):
        if key not in runs:
            continue
        regs = sorted(x.get("reg_per_s", 0.0) for x in runs[key])
        print("durable registrations/s (fsync on, %d connections, %s): median %.0f, rounds %s "
              "(target >= 20000)" % (args.connections, what, regs[len(regs) // 2],
                                     " ".join("%.0f" % x for x in regs)))
    print("load average %.1f at the end" % os.getloadavg()[0])

    def against_compare(key, what, cpu_target, rps_target):
        """This build against --compare (the fingerprint-only build, dc6c422)
        in the same rounds, as the targets are stated: server CPU per
        request this / other, requests/s this / other."""
        other = key + "@other"
        if key not in med or other not in med:
            return
        c = cpu_of(key) / cpu_of(other)
        r = med[key]["rps"] / med[other]["rps"]
        print("%-58s server CPU per request %.2f x (%.1f / %.1f us, target <= %.2f x: %s); "
              "requests/s %.2f x%s" % (
                  what, c, cpu_of(key), cpu_of(other), cpu_target,
                  "met" if c <= cpu_target else "not met", r,
                  (" (target >= %.2f x: %s)" % (rps_target, "met" if r >= rps_target
                                                 else "not met")) if rps_target else ""))

    if args.compare:
        print("\n# against --compare in the same rounds (the targets, with --compare "
              "the fingerprint-only build)")
        against_compare("off-reuseport", "/check-original register=off", 1.15, 0.9)
        against_compare("on-lg", "registrations, loadgen, fsync on", 1.5, None)
        against_compare("on-reuseport", "registrations, wrk, fsync on", 1.5, None)
    print("\n# ratios (target: /healthz >= 0.9 x minimal_evhttp)")
    for accept in ("reuseport", "shared"):
        ratio("healthz-" + accept, "min-" + accept, "/healthz %s vs minimal %s" % (accept, accept))
        ratio("off-" + accept, "min-" + accept,
              "/check-original register=off %s vs minimal %s" % (accept, accept))
        if args.compare:
            ratio("off-%s@other" % accept, "min-" + accept,
                  "/check-original register=off %s vs minimal, --compare" % accept)
            ratio("off-%s" % accept, "off-%s@other" % accept,
                  "/check-original register=off %s: this build vs --compare" % accept)
    ratio("off-reuseport", "min-post-reuseport",
          "/check-original register=off vs minimal, the same POST bodies")
    ratio("off-reuseport@other", "min-post-reuseport",  # with --compare only
          "/check-original register=off, --compare vs minimal, the same POST bodies")
    ratio("min-post-reuseport", "min-reuseport", "minimal: the same POST bodies vs GET /")
    ratio("on-reuseport", "min-reuseport", "/check-original register=on vs minimal")
    ratio("on-reuseport-1", "min-reuseport", "/check-original register=on, 1 worker vs minimal")
    ratio("on-nosync", "min-reuseport", "/check-original register=on --no-sync vs minimal")
    ratio("min-reuseport", "nginx", "minimal_evhttp reuseport vs nginx")
    print("# accept strategy")
    ratio("min-shared", "min-reuseport", "minimal: shared vs reuseport (keep-alive)")
    ratio("min-close-shared", "min-close-reuseport", "minimal: shared vs reuseport (close)")
    ratio("healthz-shared", "healthz-reuseport", "neardupd /healthz: shared vs reuseport")
    ratio("healthz-close-shared", "healthz-close-reuseport",
          "neardupd /healthz: shared vs reuseport (close)")
    ratio("off-shared", "off-reuseport", "neardupd /check-original: shared vs reuseport")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median": med, "runs": runs}, f, indent=1)


def loadgen_check(args):
    """A quick check (a meson test): loadgen for 1 s against neardupd with
    the small paragraph pool of the shipped texts. Its requests used to
    overflow their buffer there (four indices of a request may repeat), and
    glibc aborted. Exits 1 unless loadgen exits 0 and every answer is 200."""
    global USE_SHARED
    USE_SHARED = False
    tmp = tempfile.mkdtemp(prefix="bench-http-check-")
    build = os.path.join(ROOT, args.build)
    neardupd = os.environ.get("NEARDUPD", os.path.join(build, "server", "neardupd"))
    lg_bin = os.environ.get("LOADGEN", os.path.join(build, "tests", "bench", "loadgen"))
    articles, _ = load_articles()
    _, npara = write_lua(tmp, articles)
    proc, port = start_neardupd(neardupd, 1, "reuseport", tmp, ["--no-sync", "--no-access-log"])
    try:
        cmd = [lg_bin, "--port", str(port), "--paragraphs", os.path.join(tmp, "paragraphs.txt"),
               "--connections", "8", "--threads", "2", "--duration", "1", "--seed", "7"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    finally:
        proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("pool of %d paragraphs; loadgen exit %d: %s %s" % (npara, out.returncode,
                                                             out.stdout.strip(), out.stderr.strip()))
    ok = out.returncode == 0
    if ok:
        d = json.loads(out.stdout)
        ok = d["requests"] > 0 and d["errors"] == 0 and set(d["status"]) == {"200"}
    print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("ND_BUILD", "build"))
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--loadgen-threads", type=int, default=1,
                    help="loadgen client threads (one keeps the most CPU for the server)")
    ap.add_argument("--threads", type=int, default=0, help="server threads (0: cores)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    ap.add_argument("--quick", action="store_true", help="fewer scenarios")
    ap.add_argument("--webhook", action="store_true",
                    help="also run off-reuseport and on-reuseport with one webhook subscription "
                         "(to minimal_evhttp): keys off-reuseport+hook, on-reuseport+hook")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--compare", metavar="NEARDUPD",
                    help="another neardupd binary: every neardupd scenario also runs with it")
    ap.add_argument("--only", help="comma-separated scenario keys to run, e.g. "
                    "min-reuseport,on-reuseport (see scenarios())")
    ap.add_argument("--no-shared", action="store_true",
                    help="ignore ../shared: texts and paragraphs from tests/integration/texts")
    ap.add_argument("--loadgen-check", action="store_true",
                    help="only run loadgen for 1 s with the shipped texts' paragraphs (a test)")
    args = ap.parse_args()
    random.seed(1)
    global USE_SHARED
    USE_SHARED = not args.no_shared
    if args.loadgen_check:
        loadgen_check(args)
    run(args)


if __name__ == "__main__":
    main()
