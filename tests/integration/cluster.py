"""A replicated neardup on loopback, for tests/integration/test_replicas.py and
tests/bench/bench_replicas.py (the contract of a replicated node:
its --nats, --stream, --node-name flags, GET /replica, /readyz):

- NatsCluster: N nats-server processes (Debian's 2.9) forming one JetStream
  cluster, each with its own config file, store directory, client port, route
  port and HTTP monitoring port on 127.0.0.1; wait_meta_leader() polls the
  monitoring endpoint /jsz until the servers agree on a JetStream meta
  leader; the servers do not advertise each other to clients
  (no_advertise), so a client given one URL stays on that server; each
  server can be killed (SIGKILL), stopped (SIGSTOP), continued and
  restarted on its store;
- replica_node(): a harness.Server started with --nats pointing at ONE NATS
  server only (stopping that server cuts the node off), --node-name and
  --stream;
- ReplicaHAProxy: haproxy in the foreground with the shipped
  deploy/haproxy/haproxy-replicas.cfg, only addresses, ports, the stats
  socket and the log target substituted;
- texts: unrelated articles made of random words of the shipped test texts
  (tests/integration/texts), and near duplicates of them (a few words
  changed).

Standard library only. Every process started here is killed by cleanup(),
which the callers run in a finally block; every wait is bounded.
"""

import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import harness as _harness  # noqa: E402
from harness import (HOST, SOURCE_ROOT, HAProxyProcess, HAProxyTimings, Server, check,
                     load_texts, request)

REPLICAS_CFG = os.environ.get(
    "ND_HAPROXY_REPLICAS_CFG",
    os.path.join(SOURCE_ROOT, "deploy", "haproxy", "haproxy-replicas.cfg"))


free_ports = _harness.free_ports  # below the ephemeral range: safe to restart on


def http_get_json(port, path, timeout=2.0, host=HOST):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def proc_cpu_seconds(pid):
    """utime + stime of a process (from /proc/PID/stat), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- NATS --

class NatsServer:
    """One nats-server. peer_route_ports: the other servers' route ports on
    HOST, or (host, port) pairs. By default every port is on HOST; host (the
    client and monitoring ports), route_host (the route port) and netns (a
    network namespace the server runs in, with `ip netns exec`) place it
    elsewhere: test_history.py puts one server in a namespace of its own to
    cut its routes."""

    def __init__(self, tmp, name, port, route_port, mon_port, peer_route_ports,
                 cluster_name="ndtest", host=HOST, route_host=None, netns=None):
        self.name = name
        self.host = host
        self.route_host = route_host or host
        self.netns = netns
        self.port = port
        self.route_port = route_port
        self.mon_port = mon_port
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.store = os.path.join(self.dir, "js")
        self.conf = os.path.join(self.dir, "nats.conf")
        self.log_path = os.path.join(self.dir, "nats.log")
        routes = ", ".join("nats-route://%s:%d" % (p if isinstance(p, tuple) else (HOST, p))
                           for p in peer_route_ports)
        with open(self.conf, "w") as f:
            f.write("server_name: %s\n" % name)
            f.write("listen: %s:%d\n" % (host, port))
            f.write("http: %s:%d\n" % (host, mon_port))
            f.write("jetstream {\n  store_dir: \"%s\"\n  max_memory_store: 256MB\n"
                    "  max_file_store: 2GB\n}\n" % self.store)
            # no_advertise: clients are not told the other servers' URLs,
            # so a node given one URL stays on that server (cut off when it
            # stops) instead of reconnecting to a peer it discovered.
            f.write("cluster {\n  name: %s\n  listen: %s:%d\n  no_advertise: true\n"
                    "  routes: [ %s ]\n}\n" % (cluster_name, self.route_host, route_port, routes))
        self.proc = None
        self._log = None
        self.stopped = False  # SIGSTOPped

    @property
    def url(self):
        return "nats://%s:%d" % (self.host, self.port)

    def start(self):
        check(self.proc is None or self.proc.poll() is not None, "%s already runs", self.name)
        self._log = open(self.log_path, "ab")
        cmd = ["nats-server", "-c", self.conf]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns] + cmd  # which execs nats-server
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self.stopped = False
        deadline = time.monotonic() + 15
        while True:
            check(self.proc.poll() is None, "nats-server %s exited %s:\n%s", self.name,
                  self.proc.returncode, self.log_tail())
            try:
                status, _ = http_get_json(self.mon_port, "/varz", timeout=1, host=self.host)
                if status == 200:
                    return self
            except (OSError, ValueError, http.client.HTTPException):
                pass
            check(time.monotonic() < deadline, "nats-server %s: no monitoring port:\n%s",
                  self.name, self.log_tail())
            time.sleep(0.05)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def kill9(self):
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.stopped = False

    def sigstop(self):
        check(self.running(), "%s is not running", self.name)
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self):
        if self.running():
            self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def terminate(self, timeout=10):
        if self.proc is None:
            return
        if self.running():
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log:
            self._log.close()
            self._log = None

    def jsz(self, query="", timeout=2.0):
        status, body = http_get_json(self.mon_port, "/jsz" + query, timeout=timeout,
                                     host=self.host)
        check(status == 200, "%s /jsz%s: %s", self.name, query, status)
        return body

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""


class NatsCluster:
    """n nats-servers (n1..nN) with JetStream, routes to each other.
    placement: None (every port on HOST), or n dicts of NatsServer's host,
    route_host and netns (absent keys: HOST, host, none)."""

    def __init__(self, tmp, n=3, placement=None):
        self.tmp = tmp
        ports = free_ports(3 * n)
        client, route, mon = ports[:n], ports[n:2 * n], ports[2 * n:]
        if placement is None:
            self.servers = [NatsServer(tmp, "n%d" % (i + 1), client[i], route[i], mon[i],
                                       [route[j] for j in range(n) if j != i])
                            for i in range(n)]
            return
        where = [dict(host=p.get("host", HOST), route_host=p.get("route_host") or
                      p.get("host", HOST), netns=p.get("netns")) for p in placement]
        self.servers = [NatsServer(tmp, "n%d" % (i + 1), client[i], route[i], mon[i],
                                   [(where[j]["route_host"], route[j])
                                    for j in range(n) if j != i], **where[i])
                        for i in range(n)]

    def start(self, timeout=30):
        for s in self.servers:
            s.start()
        return self.wait_meta_leader(timeout)

    def live(self):
        return [s for s in self.servers if s.running() and not s.stopped]

    def by_name(self, name):
        for s in self.servers:
            if s.name == name:
                return s
        raise AssertionError("no NATS server %r" % name)

    def meta_leader(self):
        """The meta leader all live servers agree on, else None."""
        leaders = set()
        for s in self.live():
            try:
                mc = s.jsz(timeout=1).get("meta_cluster") or {}
            except (OSError, ValueError, http.client.HTTPException, AssertionError):
                return None
            leaders.add(mc.get("leader") or "")
        if len(leaders) == 1 and "" not in leaders:
            return leaders.pop()
        return None

    def wait_meta_leader(self, timeout=30):
        """Waits until the live servers agree on a JetStream meta leader (one
        that is itself live); returns its name."""
        deadline = time.monotonic() + timeout
        live_names = {s.name for s in self.live()}
        while True:
            leader = self.meta_leader()
            if leader in live_names:
                return leader
            check(time.monotonic() < deadline, "no JetStream meta leader after %ss:\n%s",
                  timeout, self.describe())
            time.sleep(0.1)

    def _stream_detail(self, server, stream):
        """The stream as server sees it (its own replica's state), or None."""
        try:
            body = server.jsz("?streams=true", timeout=1)
        except (OSError, ValueError, http.client.HTTPException, AssertionError):
            return None
        for acc in body.get("account_details") or []:
            for sd in acc.get("stream_detail") or []:
                if sd.get("name") == stream:
                    return sd
        return None

    def stream_info(self, stream):
        """{live server name: (leader it sees, its last_seq)} for the stream."""
        out = {}
        for s in self.live():
            sd = self._stream_detail(s, stream)
            if sd is not None:
                out[s.name] = ((sd.get("cluster") or {}).get("leader") or None,
                               (sd.get("state") or {}).get("last_seq"))
        return out

    def agreed_leader(self, stream):
        """One look: (the live server every live server names as the
        stream's leader, or None; stream_info())."""
        info = self.stream_info(stream)
        leaders = {v[0] for v in info.values()}
        live_names = {s.name for s in self.live()}
        return (leaders.pop() if len(leaders) == 1 and leaders <= live_names else None), info

    def stream_leader(self, stream, timeout=20):
        """The stream's leader (a live server all live servers agree on)."""
        deadline = time.monotonic() + timeout
        while True:
            leader, info = self.agreed_leader(stream)
            if leader:
                return leader
            check(time.monotonic() < deadline, "stream %s has no leader after %ss: %r\n%s",
                  stream, timeout, info, self.describe())
            time.sleep(0.1)

    def consumer_hosts(self, stream):
        """{client connection name: server name} for the consumers of stream:
        which server holds the consumer that delivers to each client (a
        neardupd node names its connection after --node-name). A consumer
        is matched to its client by its deliver subject, which the client
        subscribes to (/connz?subs=1)."""
        subs = {}
        for s in self.live():
            try:
                status, body = http_get_json(s.mon_port, "/connz?subs=1&limit=1024", timeout=2,
                                             host=s.host)
            except (OSError, ValueError, http.client.HTTPException):
                continue
            for c in (body or {}).get("connections") or []:
                for subj in c.get("subscriptions_list") or []:
                    subs[subj] = c.get("name") or ""
        out = {}
        for s in self.live():
            try:
                body = s.jsz("?consumers=true&config=true", timeout=2)
            except (OSError, ValueError, http.client.HTTPException, AssertionError):
                continue
            for acc in body.get("account_details") or []:
                for sd in acc.get("stream_detail") or []:
                    if sd.get("name") != stream:
                        continue
                    for c in sd.get("consumer_detail") or []:
                        leader = (c.get("cluster") or {}).get("leader") or s.name
                        subj = (c.get("config") or {}).get("deliver_subject")
                        if subj in subs and leader == s.name:
                            out[subs[subj]] = s.name
        return out

    def describe(self):
        out = []
        for s in self.servers:
            state = "stopped" if s.stopped else ("running" if s.running() else "down")
            out.append("--- %s (%s, client %d, monitor %d):\n%s"
                       % (s.name, state, s.port, s.mon_port, s.log_tail(8)))
        return "\n".join(out)

    def pids(self):
        return [s.pid() for s in self.servers if s.running()]

    def cleanup(self):
        for s in self.servers:
            try:
                s.terminate()
            except Exception:  # noqa: BLE001 - cleanup goes on
                if s.proc and s.proc.poll() is None:
                    s.proc.kill()


# -- neardupd nodes --

def replica_args(nats_url, name, stream, extra=()):
    return ["--nats", nats_url, "--node-name", name, "--stream", stream] + list(extra)


def replica_node(nats, name, stream, data_dir=None, extra=(), **kw):
    """A harness.Server (not started) that replicates through nats, a
    NatsServer (its URL only: stopping that server cuts the node off)."""
    return Server(replica_args(nats.url, name, stream, extra), data_dir=data_dir, **kw)


def replica_state(srv, timeout=5, headers=None):
    """GET /replica of srv (headers: an operator's Authorization when the
    node has tokens)."""
    status, body = srv.json("GET", "/replica", headers=headers, timeout=timeout)
    check(status == 200 and isinstance(body, dict),
          "GET /replica on %s: %s %r", srv.port, status, body)
    return body


def wait_converged(nodes, timeout=30, names=None, headers=None):
    """Waits until every node of nodes has applied the whole stream (lag 0,
    applied_seq == stream_seq, all equal) and all digests and document
    counts are equal (headers: replica_state()'s). Returns the list of
    /replica states."""
    deadline = time.monotonic() + timeout
    names = names or [str(n.port) for n in nodes]
    last = None
    while True:
        try:
            states = [replica_state(n, timeout=2, headers=headers) for n in nodes]
        except (OSError, AssertionError, http.client.HTTPException) as e:
            states = None
            last = repr(e)
        if states:
            last = states
            seqs = {(s.get("applied_seq"), s.get("stream_seq")) for s in states}
            digests = {s.get("digest") for s in states}
            docs = {s.get("documents") for s in states}
            if (len(seqs) == 1 and len(digests) == 1 and len(docs) == 1
                    and all(s.get("lag") == 0 for s in states)):
                a, b = seqs.pop()
                if a == b:
                    return states
        if time.monotonic() > deadline:
            raise AssertionError("nodes did not converge within %ss:\n%s" % (
                timeout, "\n".join("  %s: %s" % (nm, json.dumps(st)) for nm, st in
                                   zip(names, last if isinstance(last, list) else [last]))))
        time.sleep(0.1)


def wait_readyz(srv, want, timeout):
    """Seconds until GET /readyz answers want (200 or 503); returns
    (seconds, body)."""
    t0 = time.monotonic()
    last = None
    while True:
        try:
            status, body = srv.json("GET", "/readyz", timeout=2)
            last = (status, body)
            if status == want:
                return time.monotonic() - t0, body
        except (OSError, http.client.HTTPException) as e:
            last = repr(e)
        check(time.monotonic() - t0 < timeout, "/readyz on %s: %r after %.1fs (wanted %s)",
              srv.port, last, timeout, want)
        time.sleep(0.05)


# -- HAProxy with the shipped replicas configuration --

def _sections(text):
    """[(header line index, keyword, name, [line indexes of the body])]."""
    out = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and not line.startswith("#"):
            w = line.split()
            out.append([i, w[0], w[1] if len(w) > 1 else "", []])
        elif out:
            out[-1][3].append(i)
    return lines, out


def _strip_comment(line):
    return line.split("#", 1)[0]


class ReplicaHAProxy(HAProxyProcess):
    """haproxy -db with REPLICAS_CFG: the backend's server lines (three, no
    backup) get the nodes' addresses in order, the client-facing bind the
    front port, other binds free ports, the stats socket a file in tmp, the
    log goes to stderr; chroot/user/group/daemon are dropped."""

    def __init__(self, tmp, node_ports, cfg=REPLICAS_CFG):
        self.tmp = tmp
        self.src = cfg
        check(os.path.exists(cfg), "%s does not exist (the shipped HAProxy configuration "
              "over replicated nodes)", cfg)
        with open(cfg) as f:
            shipped = f.read()
        self.sock = os.path.join(tmp, "haproxy-admin.sock")
        lines, sections = _sections(shipped)
        # The backends with server lines: the one the frontend defaults to
        # (readiness-checked), and any fallback used while it has no server
        # left; each gets the nodes' addresses in order.
        backends = [s for s in sections if s[1] in ("backend", "listen")
                    and any(_strip_comment(lines[i]).split()[:1] == ["server"] for i in s[3])]
        check(backends, "%s: no backend with server lines", cfg)
        defaults = [w[1] for s in sections if s[1] == "frontend" for i in s[3]
                    for w in [_strip_comment(lines[i]).split()] if w[:1] == ["default_backend"]]
        main = [s for s in backends if s[2] in defaults] or backends[:1]
        be = main[0]
        self.backend = be[2]
        self.fallbacks = [s[2] for s in backends if s is not be]
        self.timings = HAProxyTimings([_strip_comment(lines[i]) for i in be[3]], shipped)
        self.server_names = []
        for b in backends:
            servers = [i for i in b[3] if _strip_comment(lines[i]).split()[:1] == ["server"]]
            check(len(servers) == len(node_ports), "%s: backend %s has %d servers, want %d",
                  cfg, b[2], len(servers), len(node_ports))
            for i, port in zip(servers, node_ports):
                w = _strip_comment(lines[i]).split()
                check("backup" not in w[3:], "%s: server %s is a backup: %r", cfg, w[1], lines[i])
                if b is be:
                    self.server_names.append(w[1])
                indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
                lines[i] = indent + " ".join(["server", w[1], "%s:%d" % (HOST, port)] + w[3:])
        # Binds: the frontend (or listen) that leads to the backend gets the
        # front port; every other bind a free port of its own.
        n_binds = sum(1 for s in sections for i in s[3]
                      if _strip_comment(lines[i]).split()[:1] == ["bind"])
        ports = free_ports(n_binds + 1)
        self.port = None
        self.other_ports = []
        for s in sections:
            body = [_strip_comment(lines[i]).split() for i in s[3]]
            front = (s[1] == "frontend" and any(
                w[:2] == ["default_backend", self.backend] or
                (w[:1] == ["use_backend"] and len(w) > 1 and w[1] == self.backend)
                for w in body)) or (s[1] == "listen" and s is be)
            for i in s[3]:
                w = _strip_comment(lines[i]).split()
                if w[:1] != ["bind"]:
                    continue
                port = ports.pop()
                if front and self.port is None:
                    self.port = port
                else:
                    self.other_ports.append(port)
                indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
                lines[i] = indent + " ".join(["bind", "%s:%d" % (HOST, port)] + w[2:])
        check(self.port is not None, "%s: no bind in a frontend for backend %s", cfg,
              self.backend)
        # global: log to stderr, no chroot/user/group/daemon, our stats socket.
        glob = [s for s in sections if s[1] == "global"]
        check(len(glob) == 1, "%s: no global section", cfg)
        have_sock = False
        for i in glob[0][3]:
            w = _strip_comment(lines[i]).split()
            if w[:1] == ["log"]:
                lines[i] = "    log stderr format raw local0 info"
            elif w[:1] in (["chroot"], ["user"], ["group"], ["daemon"], ["pidfile"]):
                lines[i] = ""
            elif w[:2] == ["stats", "socket"]:
                lines[i] = "    stats socket %s mode 600 level admin" % self.sock
                have_sock = True
        if not have_sock:
            lines[glob[0][0]] += "\n    stats socket %s mode 600 level admin" % self.sock
        self.text = "\n".join(lines)
        self.cfg = os.path.join(tmp, "haproxy-replicas.cfg")
        with open(self.cfg, "w") as f:
            f.write(self.text)
        self.log_path = os.path.join(tmp, "haproxy.log")


class ReplicaCluster:
    """NATS cluster + n neardupd nodes (node i talks to NATS server i only)
    + optionally HAProxy. Use as a context manager; everything is killed at
    the end, and a node that is still running is stopped with SIGTERM and
    must exit 0 (when the body did not fail)."""

    def __init__(self, n=3, haproxy=True, stream=None, sync=False, threads=2,
                 node_extra=(), tmp_prefix="neardup-replicas-", nats_placement=None):
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix=tmp_prefix)
        self.nats = NatsCluster(os.path.join(self.tmp, "nats"), n, placement=nats_placement)
        self.stream = stream or "nd%d_%d" % (os.getpid(), time.monotonic_ns() % 10 ** 9)
        self.sync = sync
        self.threads = threads
        self.node_extra = list(node_extra)
        self.nodes = []
        self.extra_servers = []  # other Servers to clean up
        self.want_haproxy = haproxy
        self.haproxy = None

    def name(self, i):
        return "nd-%d" % (i + 1)

    def data_dir(self, i):
        return os.path.join(self.tmp, "node%d" % (i + 1), "data")

    def new_node(self, i, data_dir=None, nats_index=None, in_memory=False, wait_ready=True,
                  port=None):
        """A Server for node i (not started), on NATS server nats_index (i
        by default), listening on port (default: the port node i had, so
        that HAProxy's server line stays right; a new node: any)."""
        if port is None and i < len(self.nodes):
            port = self.nodes[i].port
        nats = self.nats.servers[i if nats_index is None else nats_index]
        args = replica_args(nats.url, self.name(i), self.stream, self.node_extra)
        if in_memory:
            srv = Server(args, in_memory=True, sync=self.sync, threads=self.threads,
                         wait_ready=wait_ready, port=port)
            srv.tmp = tempfile.mkdtemp(prefix="node%d-mem-" % (i + 1), dir=self.tmp)
        else:
            d = data_dir or self.data_dir(i)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            srv = Server(args, data_dir=d, sync=self.sync, threads=self.threads,
                         wait_ready=wait_ready, port=port)
            srv.tmp = os.path.dirname(d)  # logs next to the data
        return srv

    def start(self):
        self.nats.start()
        for i in range(self.n):
            srv = self.new_node(i)
            self.nodes.append(srv)
            srv.start()  # waits for /readyz 200
        if self.want_haproxy:
            self.haproxy = ReplicaHAProxy(self.tmp, [s.port for s in self.nodes])
            self.haproxy.start()
            for nm in self.haproxy.server_names:
                self.haproxy.wait_status(nm, "UP", self.haproxy.timings.up_within() + 5)
        return self

    def restart_node(self, i):
        """Stops node i (SIGTERM; or it was killed) and starts it again on
        its directory and its port (HAProxy's server line stays right)."""
        srv = self.nodes[i]
        srv.fixed_port = srv.port
        return srv.restart()

    def replace_node(self, i, srv):
        """Makes srv node i (the old one must have been killed/stopped)."""
        old = self.nodes[i]
        if old is not srv:
            self.extra_servers.append(old)
        self.nodes[i] = srv

    def front(self, timeout=20):
        return http.client.HTTPConnection(HOST, self.haproxy.port, timeout=timeout)

    def describe(self):
        out = [self.nats.describe()]
        for i, s in enumerate(self.nodes):
            out.append("--- %s (port %s):\n%s" % (self.name(i), s.port, s.log_tail(12)))
        if self.haproxy:
            out.append("--- haproxy:\n" + self.haproxy.log_text(1500))
        return "\n".join(out)

    def cleanup(self, ok):
        errors = []
        try:
            if self.haproxy:
                self.haproxy.stop()
            for s in self.nodes:
                if ok and s.proc and s.proc.poll() is None:
                    try:
                        code = s.stop(timeout=20)
                        if code != 0:
                            errors.append("node on port %s exited %s at SIGTERM:\n%s"
                                          % (s.port, code, s.log_tail()))
                        s.check_sanitizers()
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(str(e))
        finally:
            for s in self.nodes + self.extra_servers:
                s.kill()
                s._close_log()
            self.nats.cleanup()
            if os.environ.get("ND_KEEP_TMP") is None:
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                print("  (kept %s)" % self.tmp)
        check(not errors, "\n".join(errors))

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup(False)
            raise

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(exc_type is None)
        return False


# -- texts --

_TEXTS = None
_VOCAB = None


def vocabulary():
    """{"en": [words], "zh": [characters]} of the shipped test texts."""
    global _TEXTS, _VOCAB
    if _VOCAB is None:
        _TEXTS = load_texts()
        en, zh = set(), set()
        for k, v in _TEXTS.items():
            if k.startswith("zh"):
                zh |= {c for c in v if "\u4e00" <= c <= "\u9fff"}
            else:
                en |= set(re.findall(r"[A-Za-z][A-Za-z'-]*", v))
        _VOCAB = {"en": sorted(en), "zh": sorted(zh)}
    return _VOCAB


def article(seed, lang="en", words=110):
    """An article of random words (characters for zh) of the shipped texts,
    drawn from seed: texts of different seeds share no passage and are
    unrelated; English ~650 characters, Chinese ~330."""
    rng = random.Random("article-%s-%s" % (lang, seed))
    vocab = vocabulary()[lang]
    if lang == "zh":
        chars = [rng.choice(vocab) for _ in range(words * 3)]
        out = []
        for i, c in enumerate(chars):
            out.append(c)
            if i % 17 == 16:
                out.append("，" if i % 3 else "。")
        return "".join(out)
    out = []
    for i in range(words):
        w = rng.choice(vocab)
        out.append(w)
        if i % 13 == 12:
            out[-1] += "."
    return " ".join(out)


def near_duplicate(text, seed, changes=3, lang="en"):
    """text with a few words (characters for zh) replaced by others."""
    rng = random.Random("edit-%s-%s" % (lang, seed))
    vocab = vocabulary()[lang]
    if lang == "zh":
        chars = list(text)
        pos = [i for i, c in enumerate(chars) if "\u4e00" <= c <= "\u9fff"]
        for i in rng.sample(pos, changes):
            chars[i] = rng.choice(vocab)
        return "".join(chars)
    words = text.split(" ")
    for i in rng.sample(range(len(words)), changes):
        words[i] = rng.choice(vocab)
    return " ".join(words)


def register_body(doc, text, **kw):
    body = {"id": doc, "text": text, "register": True}
    body.update(kw)
    return json.dumps(body).encode("utf-8")


def post(conn, path, body, headers=None):
    """POST JSON on a keep-alive connection; (status, headers, parsed body)."""
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    status, h, data = request(conn, "POST", path, body, hdrs, close=False)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = data[:300]
    return status, h, parsed


class Sampler(threading.Thread):
    """Samples GET /replica of nodes every interval seconds (lag values)."""

    def __init__(self, nodes, interval=0.1):
        super().__init__(daemon=True)
        self.nodes = nodes
        self.interval = interval
        self.stop_event = threading.Event()
        self.lags = []          # every lag seen
        self.errors = 0

    def run(self):
        conns = [n.connect(timeout=5) for n in self.nodes]
        while not self.stop_event.is_set():
            for k, n in enumerate(self.nodes):
                try:
                    status, _, data = request(conns[k], "GET", "/replica", close=False)
                    if status == 200:
                        self.lags.append(json.loads(data)["lag"])
                except (OSError, http.client.HTTPException, ValueError, KeyError):
                    self.errors += 1
                    conns[k].close()
                    conns[k] = n.connect(timeout=5)
            self.stop_event.wait(self.interval)
        for c in conns:
            c.close()

    def finish(self):
        self.stop_event.set()
        self.join(10)
