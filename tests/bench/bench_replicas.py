#!/usr/bin/env python3
"""Benchmark of replicated neardupd nodes on a NATS JetStream cluster,
in one run, next to a plain single node of the same build:

    python3 tests/bench/bench_replicas.py [--build build] [--duration 10]
        [--clients 8] [--threads 2] [--warmup 1] [--no-sync] [--rounds 1]
        [--only single,one,three,writer,haproxy]

Scenarios (each on fresh neardupd processes and its own stream; the NATS
cluster, three nats-server processes on loopback with JetStream, as in
tests/integration/cluster.py, is shared by the replicated ones):
  single   one neardupd without --nats (the default set-up)
  one      one replicated node (--nats to one server of the cluster)
  three    three replicated nodes, each on its own NATS server; client k
           talks to node k mod 3
  writer   the same three nodes, every client on the first one: one node
           decides every change and the other two follow (the ceiling of
           an elected writer, without its forwarding hop)
  haproxy  the same three nodes behind the shipped
           deploy/haproxy/haproxy-replicas.cfg, every client on HAProxy: it
           sends every registration to the first ready node (the writer the
           balancer elects), so this is the elected writer with its hop
Clients: --clients threads, Python's http.client with keep-alive, each
registering distinct new articles (random words of the shipped test texts,
~650 characters: every one original) as fast as the answers come, for
--warmup seconds unmeasured, then --duration seconds measured. By default
every node fsyncs each group commit, as in production (--no-sync: not).

Figures per scenario: durable registrations/s (answered 200 "registered":
true; on a replicated node that is after the stream's quorum acknowledged it
and the node applied it) and the ratio to the single node; latency p50/p99;
CPU per registration (user + system from /proc/PID/stat, before/after the
measured window) of the neardupd processes, of the nats-server processes and
of this client process; replication lag under load (GET /replica "lag",
stream entries, sampled every 50 ms on every node: p50 and max) and how long
the nodes take to converge once the load stops. The last lines say how busy
the cores were, which is what limits the figures on a small machine: the
clients, NATS and the nodes share the same cores.

A benchmark, not a test: exits 0 unless a process fails to start or an
answer is wrong (then 1)."""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


from harness import ThreadGroup  # noqa: E402


class Clients(ThreadGroup):
    """n threads registering new articles on targets (ports), keep-alive."""

    def __init__(self, ports, n, tag):
        super().__init__(n)
        self.ports = ports
        self.tag = tag
        self.window = None  # (t0, t1): what is counted
        self.lock = threading.Lock()
        self.lat = []       # latencies of answers inside the window
        self.ok = 0
        self.errors = []

    def run(self, k):
        from cluster import article, post, register_body
        port = self.ports[k % len(self.ports)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        n = 0
        while not self.stop.is_set():
            doc = "%s-%d-%d" % (self.tag, k, n)
            body = register_body(doc, article("%s-%d-%d" % (self.tag, k, n)))
            n += 1
            t0 = time.monotonic()
            try:
                st, _, reply = post(conn, "/check-original", body)
            except (OSError, http.client.HTTPException) as e:
                with self.lock:
                    self.errors.append((doc, repr(e)))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                time.sleep(0.05)
                continue
            t1 = time.monotonic()
            good = st == 200 and isinstance(reply, dict) and reply.get("registered") is True
            with self.lock:
                if not good:
                    self.errors.append((doc, st, reply))
                w = self.window
                if good and w and w[0] <= t0 and (w[1] is None or t1 <= w[1]):
                    self.ok += 1
                    self.lat.append(t1 - t0)
        conn.close()


def cpu(pids):
    from cluster import proc_cpu_seconds
    total = 0.0
    for p in pids:
        try:
            total += proc_cpu_seconds(p)
        except OSError:
            pass
    return total


def conflicts(nodes):
    """Sum of neardup_replica_conflicts_total over nodes (None: no metric)."""
    from harness import parse_metrics
    total = 0.0
    for n in nodes:
        status, _, data = n.request("GET", "/metrics", timeout=5)
        m = parse_metrics(data.decode()) if status == 200 else {}
        if "neardup_replica_conflicts_total" not in m:
            return None
        total += m["neardup_replica_conflicts_total"]
    return total


def self_cpu():
    t = os.times()
    return t.user + t.system


class Front:
    """A client target that is not a node (HAProxy's port)."""

    def __init__(self, port):
        self.port = port


def measure(name, nodes, nats_pids, args, replicated, targets=None, lb_pids=()):
    """Runs the clients against targets (default: all of nodes, started
    Servers; or Front objects); lb_pids: HAProxy's process, whose CPU is
    reported apart. Returns figures."""
    from cluster import Sampler, wait_converged
    node_pids = [n.proc.pid for n in nodes]
    clients = Clients([n.port for n in (targets or nodes)], args.clients,
                      "b%s%d" % (name, time.monotonic_ns()))
    sampler = Sampler(nodes, 0.05) if replicated else None
    clients.start()
    try:
        time.sleep(args.warmup)
        k0 = conflicts(nodes) if replicated else None
        c0 = (cpu(node_pids), cpu(nats_pids), self_cpu(), cpu(lb_pids))
        t0 = time.monotonic()
        with clients.lock:
            clients.window = (t0, None)
        if sampler:
            sampler.start()
        time.sleep(args.duration)
        t1 = time.monotonic()
        with clients.lock:
            clients.window = (t0, t1)
        c1 = (cpu(node_pids), cpu(nats_pids), self_cpu(), cpu(lb_pids))
        k1 = conflicts(nodes) if replicated else None
    finally:
        if sampler:
            sampler.finish()
        clients.finish()
    t_stop = time.monotonic()
    converge = None
    if replicated:
        states = wait_converged(nodes, 60)
        converge = time.monotonic() - t_stop
    if clients.errors:
        raise RuntimeError("%s: %d wrong answers, e.g. %r" % (name, len(clients.errors),
                                                             clients.errors[:3]))
    secs = t1 - t0
    n = max(1, clients.ok)
    fig = {
        "scenario": name, "nodes": len(nodes), "registrations": clients.ok,
        "seconds": round(secs, 3), "per_s": clients.ok / secs,
        "p50_ms": 1000 * pct(clients.lat, 50), "p99_ms": 1000 * pct(clients.lat, 99),
        "node_cpu_ms": 1000 * (c1[0] - c0[0]) / n, "nats_cpu_ms": 1000 * (c1[1] - c0[1]) / n,
        "client_cpu_ms": 1000 * (c1[2] - c0[2]) / n,
        "lb_cpu_ms": 1000 * (c1[3] - c0[3]) / n,
        "busy_cores": ((c1[0] - c0[0]) + (c1[1] - c0[1]) + (c1[2] - c0[2]) +
                       (c1[3] - c0[3])) / secs,
        "node_busy": (c1[0] - c0[0]) / secs, "nats_busy": (c1[1] - c0[1]) / secs,
        "client_busy": (c1[2] - c0[2]) / secs,
        "mean_ms": 1000 * statistics.mean(clients.lat) if clients.lat else float("nan"),
    }
    if k0 is not None and k1 is not None:
        fig["conflicts_per_reg"] = (k1 - k0) / n
    if sampler:
        fig["lag_p50"] = pct(sampler.lags, 50)
        fig["lag_max"] = max(sampler.lags) if sampler.lags else float("nan")
        fig["lag_samples"] = len(sampler.lags)
        fig["converge_s"] = converge
        fig["documents"] = states[0]["documents"]
    return fig


def run_single(args, sync):
    from harness import Server
    srv = Server(sync=sync, threads=args.threads)
    try:
        srv.start()
        return measure("single", [srv], [], args, False)
    finally:
        srv.cleanup()


def run_replicated(args, sync, nats, count, name, one_writer=False, haproxy=False):
    from cluster import replica_args
    from harness import Server
    stream = "bench_%s_%d" % (name, time.monotonic_ns() % 10 ** 9)
    tmp = tempfile.mkdtemp(prefix="neardup-bench-replicas-")
    nodes = []
    ha = None
    try:
        for i in range(count):
            srv = Server(replica_args(nats.servers[i].url, "nd-%d" % (i + 1), stream),
                         data_dir=os.path.join(tmp, "node%d" % (i + 1), "data"), sync=sync,
                         threads=args.threads)
            srv.tmp = os.path.join(tmp, "node%d" % (i + 1))
            os.makedirs(srv.tmp, exist_ok=True)
            nodes.append(srv)
            srv.start()
        if haproxy:
            from cluster import ReplicaHAProxy
            ha = ReplicaHAProxy(tmp, [n.port for n in nodes]).start()
            for server in ha.server_names:
                ha.wait_status(server, "UP", 15)
            return measure(name, nodes, nats.pids(), args, True, [Front(ha.port)],
                           [ha.proc.pid])
        return measure(name, nodes, nats.pids(), args, True, nodes[:1] if one_writer else None)
    finally:
        if ha:
            ha.stop()
        for s in nodes:
            s.kill()
            s._close_log()
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="neardupd --threads")
    ap.add_argument("--no-sync", action="store_true", help="neardupd --no-sync (no fsync)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the scenarios, interleaved; the median round is shown")
    ap.add_argument("--only", default="single,one,three")
    args = ap.parse_args()
    if not os.environ.get("NEARDUPD"):
        os.environ["NEARDUPD"] = os.path.join(os.path.abspath(args.build), "server", "neardupd")
    from cluster import NatsCluster
    import shutil
    only = args.only.split(",")
    sync = not args.no_sync
    if any(s in only for s in ("one", "three", "writer", "haproxy")) and \
            shutil.which("nats-server") is None:
        print("nats-server is not installed (deploy/install-deps.sh --test)")
        return 1
    print("neardupd %s; %d client threads, %.0f s measured (+%.0f s warm-up), --threads %d, "
          "%s; %d cores" % (os.environ["NEARDUPD"], args.clients, args.duration, args.warmup,
                            args.threads, "fsync per commit" if sync else "--no-sync",
                            os.cpu_count()), flush=True)
    results = {s: [] for s in only}
    nats = None
    tmp = tempfile.mkdtemp(prefix="neardup-bench-nats-")
    try:
        if any(s in only for s in ("one", "three", "writer", "haproxy")):
            nats = NatsCluster(tmp, 3)
            nats.start()
        for r in range(args.rounds):
            for s in only:
                if s == "single":
                    fig = run_single(args, sync)
                elif s == "one":
                    fig = run_replicated(args, sync, nats, 1, "one")
                elif s == "three":
                    fig = run_replicated(args, sync, nats, 3, "three")
                elif s == "writer":
                    fig = run_replicated(args, sync, nats, 3, "writer", one_writer=True)
                elif s == "haproxy":
                    fig = run_replicated(args, sync, nats, 3, "haproxy", haproxy=True)
                else:
                    raise SystemExit("unknown scenario %r" % s)
                results[s].append(fig)
                print("  round %d %-6s %7.0f registrations/s" % (r + 1, s, fig["per_s"]),
                      flush=True)
    finally:
        if nats:
            nats.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {s: sorted(v, key=lambda f: f["per_s"])[len(v) // 2] for s, v in results.items()}
    base = med.get("single")
    label = {"single": "single node (no NATS)", "one": "1 replicated node",
             "three": "3 replicated nodes",
             "writer": "3 nodes, writes on 1",
             "haproxy": "3 nodes, HAProxy writer"}
    print()
    print("%-22s %9s %8s %7s %7s %9s %9s %9s %9s %7s %7s %8s"
          % ("", "regs/s", "x single", "p50 ms", "p99 ms", "node ms", "nats ms", "client ms",
             "total ms", "lag p50", "lag max", "catch-up"))
    print("%-22s %9s %8s %7s %7s %9s %9s %9s %9s %7s %7s %8s"
          % ("", "", "", "", "", "CPU/reg", "CPU/reg", "CPU/reg", "CPU/reg", "entries",
             "entries", "s"))
    for s in only:
        f = med[s]
        ratio = "%.2f" % (f["per_s"] / base["per_s"]) if base else "-"
        total = f["node_cpu_ms"] + f["nats_cpu_ms"]
        lag50 = "%d" % f["lag_p50"] if "lag_p50" in f else "-"
        lagmax = "%d" % f["lag_max"] if "lag_max" in f else "-"
        conv = "%.2f" % f["converge_s"] if f.get("converge_s") is not None else "-"
        print("%-22s %9.0f %8s %7.2f %7.2f %9.3f %9.3f %9.3f %9.3f %7s %7s %8s"
              % (label[s], f["per_s"], ratio, f["p50_ms"], f["p99_ms"], f["node_cpu_ms"],
                 f["nats_cpu_ms"], f["client_cpu_ms"], total, lag50, lagmax, conv))
    if base:
        for s in only:
            if s != "single":
                f = med[s]
                print("%s vs single: %.2fx the registrations/s, %.2fx the server CPU per "
                      "registration (neardupd + nats-server)"
                      % (label[s], f["per_s"] / base["per_s"],
                         (f["node_cpu_ms"] + f["nats_cpu_ms"]) / max(1e-9, base["node_cpu_ms"])))
    print()
    ncores = os.cpu_count() or 1
    for s in only:
        f = med[s]
        if f["client_busy"] >= 0.85:
            verdict = "the Python clients (one core: the GIL) are the limit"
        elif f["busy_cores"] >= 0.85 * ncores:
            verdict = "CPU-bound: the cores are full"
        else:
            verdict = ("latency-bound: each client waits for its answer (the cores are "
                       "not full)")
        extra = ""
        if "conflicts_per_reg" in f:
            extra = "; %.2f expected-sequence conflicts (re-check, re-publish) per " \
                    "registration" % f["conflicts_per_reg"]
        if f.get("lb_cpu_ms"):
            extra += "; HAProxy %.3f ms CPU per registration" % f["lb_cpu_ms"]
        print("%s: %.2f of %d cores busy (neardupd %.2f, nats-server %.2f, clients %.2f); "
              "%d clients / mean latency %.2f ms = %.0f/s%s: %s"
              % (label[s], f["busy_cores"], ncores, f["node_busy"], f["nats_busy"],
                 f["client_busy"], args.clients, f["mean_ms"], 1000 * args.clients / f["mean_ms"],
                 extra, verdict))
    print("RESULT " + json.dumps({s: med[s] for s in only}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
