"""The deployment files agree with neardupd and with each other:

- deploy/neardupd.env lists every setting of `neardupd --help`, each with
  the default --help prints (commented) or a value that parses, and so does
  the settings table of README.md's Operations section;
- deploy/kubernetes/neardup.yaml: a StatefulSet with a volume at the data
  directory, liveness on /healthz, readiness on /readyz, the container port
  of NEARDUP_LISTEN, a non-root user, and a termination grace period longer
  than NEARDUP_DRAIN_DELAY + NEARDUP_DRAIN_TIMEOUT;
- the systemd units stop later than the drain of the environment file;
- replicas (proto/replication.md): `nats-server -t` accepts
  deploy/nats/nats-server.conf and the copy in the Kubernetes manifests
  (which keeps its settings), with routes to three servers;
  deploy/nats/nats-server.conf's clients, routes and store agree with
  NEARDUP_NATS of deploy/systemd/neardupd-replica.env and with the NATS
  unit, which outlasts its lame duck mode; `haproxy -c` accepts
  deploy/haproxy/haproxy-replicas.cfg, which balances over three servers
  (no backup) with the health check, timings and retries of haproxy.cfg;
  deploy/kubernetes/neardup-replicas.yaml holds three NATS servers and
  three nodes, probes, volumes, names from the pod and a
  PodDisruptionBudget each; neardupd accepts the settings of both. Checks
  whose tool (nats-server, haproxy) is not installed are skipped, with a
  line saying so.

test_systemd.py runs systemd-analyze, test_haproxy.py the HAProxy file,
test_replicas.py the replicated nodes, test_container.py the Dockerfile's
recipe."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml  # Debian's python3-yaml
except ImportError:  # another python3 first on PATH: Debian's has the package
    if os.path.exists("/usr/bin/python3") and not os.environ.get("ND_YAML_REEXEC"):
        os.environ["ND_YAML_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SOURCE_ROOT, Runner, check, neardupd_path  # noqa: E402

T = Runner("test_deploy")
DEPLOY = os.path.join(SOURCE_ROOT, "deploy")


# Secrets neardupd reads from the environment only (never flags, so not
# in --help's table): its bearer token and its NATS password or token.
SECRET_SETTINGS = ("NEARDUP_TOKEN", "NEARDUP_NATS_PASSWORD", "NEARDUP_NATS_TOKEN")


def help_settings():
    """{NEARDUP_X: default} from neardupd --help."""
    out = subprocess.run([neardupd_path(), "--help"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    found = {}
    for m in re.finditer(r"env (NEARDUP_[A-Z0-9_]+), default (.*)$", out, re.M):
        found[m.group(1)] = re.sub(r" \(.*\)$", "", m.group(2).strip())
    check(len(found) >= 15, "too few settings in --help: %r", found)
    return found


def env_file():
    """[(name, value, commented, documented default)] of deploy/neardupd.env."""
    with open(os.path.join(DEPLOY, "neardupd.env")) as f:
        lines = f.read().splitlines()
    out = []
    default = None
    for line in lines:
        m = re.match(r"^#\s*\(default: (.*)\)\s*$", line)
        if m:
            default = m.group(1)
            continue
        m = re.match(r"^(#?)(NEARDUP_[A-Z0-9_]+)=(.*)$", line)
        if m:
            out.append((m.group(2), m.group(3), m.group(1) == "#", default))
            default = None
    return out


def env_file_values():
    return {name: value for name, value, commented, _ in env_file() if not commented}


@T.test
def env_file_lists_every_setting_with_its_default():
    want = help_settings()
    entries = env_file()
    names = [e[0] for e in entries]
    for name in want:
        check(names.count(name) == 1, "deploy/neardupd.env: %s appears %d times (wanted once, "
              "with its default %r)", name, names.count(name), want[name])
    for name, value, commented, default in entries:
        check(name in want, "deploy/neardupd.env sets %s, which --help does not know", name)
        check(default == want[name], "deploy/neardupd.env: %s documents default %r, --help "
              "says %r", name, default, want[name])
        if commented:
            unset = want[name] in ("", "none") and value == ""  # no value: the default
            check(value == want[name] or unset, "deploy/neardupd.env: #%s=%s is not the "
                  "default %r", name, value, want[name])


@T.test
def readme_operations_lists_every_setting():
    with open(os.path.join(SOURCE_ROOT, "README.md")) as f:
        text = f.read()
    check("\n## Operations\n" in text, "README.md has no Operations section")
    ops = text.split("\n## Operations\n", 1)[1]
    for name in help_settings():
        check("`%s`" % name in ops, "README.md, Operations: %s is not in the settings table",
              name)


@T.test
def env_file_values_are_accepted():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("NEARDUP_"):
            del env[k]
    for name, value, commented, default in env_file():
        if value != "":  # an empty default (no token file) is not a value to give
            env[name] = value
    # Every value (defaults included) parses: --help exits 0 only after the
    # environment was read without error.
    p = subprocess.run([neardupd_path(), "--help"], capture_output=True, text=True, env=env,
                       timeout=10)
    check(p.returncode == 0, "neardupd refuses deploy/neardupd.env: %s", p.stderr)


def manifests(name="neardup.yaml"):
    with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
        text = f.read()
    docs = [yaml.safe_load(d) for d in re.split(r"(?m)^---\s*$", text)]
    return [d for d in docs if d]


def find(docs, kind):
    got = [d for d in docs if d.get("kind") == kind]
    check(len(got) >= 1, "no %s in the Kubernetes manifests", kind)
    return got


def container_env(docs, c):
    """{NAME: value} of a container: its ConfigMaps, then its env (a value
    taken from the pod, valueFrom, as the dict itself)."""
    cm = {d["metadata"]["name"]: d["data"] for d in find(docs, "ConfigMap")}
    env = {}
    for src in c.get("envFrom", []):
        env.update(cm[src["configMapRef"]["name"]])
    for e in c.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else e["valueFrom"]
    return env


def check_neardup_statefulset(docs, sts, known):
    """The checks of one neardupd StatefulSet; returns its container's env."""
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    env = container_env(docs, c)
    for k in env:
        check(k in known or k in SECRET_SETTINGS,
              "the manifest sets %s, which neardupd does not know", k)
    # Volume at the data directory.
    claims = [t["metadata"]["name"] for t in spec["volumeClaimTemplates"]]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    check(env.get("NEARDUP_DATA") in mounts.values(), "NEARDUP_DATA %r not on a volume %r",
          env.get("NEARDUP_DATA"), mounts)
    check(any(n in claims for n, p in mounts.items() if p == env["NEARDUP_DATA"]),
          "the data directory is not on a volumeClaimTemplate")
    # Probes and port.
    port = int(env["NEARDUP_LISTEN"].rsplit(":", 1)[1])
    check(env["NEARDUP_LISTEN"].startswith("0.0.0.0:"), "listen %r", env["NEARDUP_LISTEN"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(port in ports.values(), "container port %r, listen %d", ports, port)
    check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", c["livenessProbe"])
    check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", c["readinessProbe"])
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in c:
            p = c[probe]["httpGet"]["port"]
            check(p == port or ports.get(p) == port, "%s on port %r", probe, p)
    # Stop: the grace period covers the drain delay and the drain deadline.
    delay = int(env.get("NEARDUP_DRAIN_DELAY", known["NEARDUP_DRAIN_DELAY"]))
    timeout = int(env.get("NEARDUP_DRAIN_TIMEOUT", known["NEARDUP_DRAIN_TIMEOUT"]))
    grace = pod["terminationGracePeriodSeconds"]
    check(grace > delay + timeout, "terminationGracePeriodSeconds %d <= drain delay %d + "
          "drain timeout %d", grace, delay, timeout)
    check(delay >= c["readinessProbe"]["periodSeconds"] *
          c["readinessProbe"].get("failureThreshold", 3),
          "drain delay %d shorter than the readiness probe needs", delay)
    # Not root; the user of the image.
    sc = pod["securityContext"]
    check(sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, sc)
    with open(os.path.join(DEPLOY, "container", "build.sh")) as f:
        uid = int(re.search(r"^NEARDUP_UID=(\d+)", f.read(), re.M).group(1))
    check(sc["runAsUser"] == uid, "runAsUser %r, the image's user is %d", sc["runAsUser"], uid)
    # The StatefulSet's Service exists and selects its pods.
    svcs = {d["metadata"]["name"]: d for d in find(docs, "Service")}
    check(spec["serviceName"] in svcs, "no Service %r", spec["serviceName"])
    labels = spec["template"]["metadata"]["labels"]
    mine = [s for s in svcs.values()
            if s["spec"]["selector"].get("app.kubernetes.io/name") ==
            labels.get("app.kubernetes.io/name")]
    check(len(mine) >= 2, "no headless and client Services for %s", sts["metadata"]["name"])
    for svc in mine:
        for k, v in svc["spec"]["selector"].items():
            check(labels.get(k) == v, "Service %s selects %s=%s", svc["metadata"]["name"], k, v)
    return env


@T.test
def kubernetes_statefulset():
    docs = manifests()
    check_neardup_statefulset(docs, find(docs, "StatefulSet")[0], help_settings())


@T.test
def systemd_units_outlast_the_drain():
    values = env_file_values()
    known = help_settings()
    delay = int(values.get("NEARDUP_DRAIN_DELAY", known["NEARDUP_DRAIN_DELAY"]))
    timeout = int(values.get("NEARDUP_DRAIN_TIMEOUT", known["NEARDUP_DRAIN_TIMEOUT"]))
    for unit in ("neardupd.service", "neardupd@.service"):
        with open(os.path.join(DEPLOY, "systemd", unit)) as f:
            text = f.read()
        m = re.search(r"^TimeoutStopSec=(\d+)s?$", text, re.M)
        check(m, "%s: no TimeoutStopSec", unit)
        check(int(m.group(1)) > delay + timeout, "%s: TimeoutStopSec %s <= %d + %d", unit,
              m.group(1), delay, timeout)
        for key in ("StateDirectory=neardup", "ProtectSystem=strict", "NoNewPrivileges=yes",
                    "PrivateTmp=yes", "DynamicUser=yes", "KillSignal=SIGTERM"):
            check(re.search(r"^%s" % re.escape(key), text, re.M), "%s: no %s", unit, key)



# -- replicas --

# The replication settings (proto/replication.md, "Settings").
REPLICA_SETTINGS = ("NEARDUP_NATS", "NEARDUP_STREAM", "NEARDUP_STREAM_REPLICAS",
                    "NEARDUP_NODE_NAME", "NEARDUP_MAX_LAG", "NEARDUP_NATS_TIMEOUT_MS")
NATS_CONF = os.path.join(DEPLOY, "nats", "nats-server.conf")
HAPROXY_DIR = os.path.join(DEPLOY, "haproxy")
REPLICA_ENV = os.path.join(DEPLOY, "systemd", "neardupd-replica.env")


def accepted(env_values, what):
    """neardupd --help exits 0 with these NEARDUP_* values (and no others)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update(env_values)
    p = subprocess.run([neardupd_path(), "--help"], capture_output=True, text=True, env=env,
                       timeout=10)
    check(p.returncode == 0, "neardupd refuses %s: %s", what, p.stderr)


def read_env(path):
    """{NAME: value} of the uncommented NEARDUP_* lines of an env file."""
    with open(path) as f:
        return dict(m.groups() for m in re.finditer(r"^(NEARDUP_[A-Z0-9_]+)=(.*)$", f.read(),
                                                    re.M))


def strip_conf(text):
    """NATS configuration text without comments and blank lines."""
    lines = [re.sub(r"\s+#.*$", "", l).strip() for l in text.splitlines()]
    return [l for l in lines if l and not l.startswith("#")]


def nats_setting(text, key):
    m = re.search(r"^\s*%s\s*[:=]\s*\"?([^\"\n]*?)\"?\s*$" % re.escape(key), text, re.M)
    return m.group(1) if m else None


def nats_routes(text):
    m = re.search(r"routes\s*[:=]\s*\[([^\]]*)\]", text)
    check(m, "no routes in the NATS configuration")
    return re.findall(r"nats-route://([^\s,\]]+)", m.group(1))


def nats_test(path, name):
    """nats-server -t on path with NATS_SERVER_NAME=name; (exit, output)."""
    env = dict(os.environ, NATS_SERVER_NAME=name) if name else \
        {k: v for k, v in os.environ.items() if k != "NATS_SERVER_NAME"}
    # The users' passwords (the authorization block) come from the environment.
    env.update(NATS_NODE_PASSWORD="node-secret", NATS_ADMIN_PASSWORD="admin-secret")
    p = subprocess.run(["nats-server", "-c", path, "-t"], capture_output=True, text=True,
                       env=env, timeout=30)
    return p.returncode, p.stdout + p.stderr


def go_duration(v):
    m = re.match(r"^(\d+)(ms|s|m)$", v)
    check(m, "cannot read the duration %r", v)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


@T.test
def nats_config():
    with open(NATS_CONF) as f:
        text = f.read()
    routes = nats_routes(text)
    check(len(routes) == 3, "routes %r: wanted the three servers", routes)
    check(nats_setting(text, "server_name") == "$NATS_SERVER_NAME",
          "server_name does not come from the environment")
    check(nats_setting(text, "store_dir") == "/var/lib/nats", "store_dir %r",
          nats_setting(text, "store_dir"))
    check(nats_setting(text, "max_file_store"), "no max_file_store")
    check(re.search(r"^\s*http\s*:\s*\S*:?8222\s*$", text, re.M), "no monitoring on 8222")
    # Every client logs in; the nodes' user publishes to the stream's subject
    # (test_nats_auth runs a node and other clients against this block).
    check(re.search(r"^authorization\s*\{", text, re.M) and "user: neardup-node" in text and
          '"neardup.changes"' in text, "no authorization block with the nodes' user")
    # The replicated nodes' URLs name the same hosts, on the client port.
    nats = read_env(REPLICA_ENV)["NEARDUP_NATS"].split(",")
    hosts = sorted(r.rsplit(":", 1)[0] for r in routes)
    check(sorted(u.split("//", 1)[1].rsplit(":", 1)[0] for u in nats) == hosts,
          "NEARDUP_NATS %r and the routes %r name different hosts", nats, routes)
    client = nats_setting(text, "listen")
    check(client and all(u.endswith(":" + client.rsplit(":", 1)[1]) for u in nats),
          "NEARDUP_NATS %r not on the client port %r", nats, client)
    # The unit: the configuration path, the store, a stop that outlasts the
    # lame duck mode.
    with open(os.path.join(DEPLOY, "systemd", "nats-server.service")) as f:
        unit = f.read()
    for key in ("ExecStart=/usr/sbin/nats-server -c /etc/nats/nats-server.conf",
                "StateDirectory=nats", "KillSignal=SIGUSR2", "ProtectSystem=strict",
                "NoNewPrivileges=yes"):
        check(re.search(r"^%s\s*$" % re.escape(key), unit, re.M), "nats-server.service: no %s", key)
    stop = int(re.search(r"^TimeoutStopSec=(\d+)s?$", unit, re.M).group(1))
    lame = go_duration(nats_setting(text, "lame_duck_duration")) + \
        go_duration(nats_setting(text, "lame_duck_grace_period"))
    check(stop > lame, "nats-server.service stops after %d s, lame duck mode takes %g s", stop,
          lame)
    if shutil.which("nats-server") is None:
        print("  nats-server is not installed: nats-server -t skipped")
        return
    rc, out = nats_test(NATS_CONF, "nats-1")
    check(rc == 0, "nats-server -t %s failed:\n%s", NATS_CONF, out)
    rc, out = nats_test(NATS_CONF, None)
    check(rc != 0 and "NATS_SERVER_NAME" in out,
          "nats-server -t without NATS_SERVER_NAME: exit %d\n%s", rc, out)


@T.test
def haproxy_replicas_config():
    with open(os.path.join(HAPROXY_DIR, "haproxy.cfg")) as f:
        single = f.read()
    with open(os.path.join(HAPROXY_DIR, "haproxy-replicas.cfg")) as f:
        text = f.read()
    # Two backends over the same three nodes: neardupd (checked on /readyz)
    # and neardupd_alive (on /healthz), used only while the first has no
    # server up (no NATS quorum anywhere): queries still answered.
    parts = re.split(r"^backend\s+(\S+)\s*$", text, flags=re.M)
    backends = dict(zip(parts[1::2], parts[2::2]))
    # And neardupd_writer: every change goes to its first ready server
    # (balance first over servers tracking neardupd's checks).
    check(set(backends) == {"neardupd", "neardupd_alive", "neardupd_writer"}, "backends %r",
          sorted(backends))
    servers = {b: re.findall(r"^\s*server\s+(\S+)\s+(\S+)(.*)$", t, re.M)
               for b, t in backends.items()}
    check(len(servers["neardupd"]) == 3 and servers["neardupd"] == servers["neardupd_alive"],
          "servers %r: wanted the same three in both", servers)
    check([s[:2] for s in servers["neardupd_writer"]] == [s[:2] for s in servers["neardupd"]]
          and all(rest.split()[:2] == ["track", "neardupd/" + name]
                  for name, _, rest in servers["neardupd_writer"]),
          "neardupd_writer's servers %r: wanted neardupd's, each tracking it",
          servers["neardupd_writer"])
    check(re.search(r"^\s*balance first\s*$", backends["neardupd_writer"], re.M),
          "neardupd_writer is not balance first")
    check(re.search(r"^\s*use_backend neardupd_writer if .*registers", text, re.M)
          and re.search(r"^\s*option http-buffer-request\s*$", text, re.M),
          "the frontend does not send registrations to neardupd_writer")
    check(not any("backup" in rest.split() for _, _, rest in servers["neardupd"]),
          "a backup server: %r", servers)
    check("uri /healthz" in backends["neardupd_alive"], "neardupd_alive is not checked on /healthz")
    check(re.search(r"^\s*use_backend neardupd_alive if \{ nbsrv\(neardupd\) eq 0 \}\s*$", text,
                    re.M), "the frontend does not fall back to neardupd_alive when none is ready")
    for b, t in backends.items():
        m = re.search(r"^\s*http-error status 503 content-type application/json string (\".*\")",
                      t, re.M)
        check(m and json.loads(json.loads(m.group(1)))["error"]["code"],
              "backend %s: HAProxy's own 503 is not a JSON error", b)
    # Same health check, timings, retries and redispatch as haproxy.cfg.
    for pattern in (r"^\s*option httpchk\s*$", r"^\s*http-check send .*$",
                    r"^\s*http-check expect .*$", r"^\s*default-server .*$",
                    r"^\s*timeout check .*$", r"^\s*retries .*$", r"^\s*retry-on .*$",
                    r"^\s*option redispatch.*$"):
        a = re.search(pattern, single, re.M)
        b = re.search(pattern, text, re.M)
        check(a and b and a.group(0).strip() == b.group(0).strip(),
              "haproxy-replicas.cfg and haproxy.cfg differ at %r: %r vs %r", pattern,
              b and b.group(0), a and a.group(0))
    check("uri /readyz" in text, "the health check is not on /readyz")
    check("haproxy-replicas.cfg" in single, "haproxy.cfg does not point to haproxy-replicas.cfg")
    if shutil.which("haproxy") is None:
        print("  haproxy is not installed: haproxy -c skipped")
        return
    p = subprocess.run(["haproxy", "-c", "-f", os.path.join(HAPROXY_DIR, "haproxy-replicas.cfg")],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, "haproxy -c haproxy-replicas.cfg failed:\n%s%s", p.stdout, p.stderr)


@T.test
def replica_env_file():
    known = help_settings()
    values = read_env(REPLICA_ENV)
    with open(REPLICA_ENV) as f:
        text = f.read()
    for name in REPLICA_SETTINGS:
        check(name in known, "neardupd --help does not know %s", name)
        check(re.search(r"^#?%s=" % name, text, re.M), "neardupd-replica.env does not show %s",
              name)
    for name in values:
        check(name in known, "neardupd-replica.env sets %s, which neardupd does not know", name)
    check(values.get("NEARDUP_NATS"), "neardupd-replica.env sets no NEARDUP_NATS")
    with open(os.path.join(DEPLOY, "systemd", "neardupd-replica.conf")) as f:
        dropin = f.read()
    for key in ("Wants=nats-server.service", "After=nats-server.service",
                "EnvironmentFile=/etc/neardup/replica.env"):
        check(re.search(r"^%s\s*$" % re.escape(key), dropin, re.M),
              "neardupd-replica.conf: no %s", key)
    check(not re.search(r"^Requires=", dropin, re.M), "neardupd-replica.conf: Requires=")
    both = read_env(os.path.join(DEPLOY, "neardupd.env"))
    both.update(values)
    accepted(both, "neardupd.env with neardupd-replica.env")


def from_pod_name(v):
    return isinstance(v, dict) and v.get("fieldRef", {}).get("fieldPath") == "metadata.name"


@T.test
def kubernetes_replicas():
    docs = manifests("neardup-replicas.yaml")
    known = help_settings()
    sets = {d["metadata"]["name"]: d for d in find(docs, "StatefulSet")}
    check(set(sets) == {"nats", "neardup"}, "StatefulSets %r", sorted(sets))
    svcs = {d["metadata"]["name"]: d for d in find(docs, "Service")}
    cms = {d["metadata"]["name"]: d["data"] for d in find(docs, "ConfigMap")}
    # NATS: three servers, file storage on a volume, routes by the headless
    # Service's names, the name from the pod, probes on the monitoring port.
    nats = sets["nats"]["spec"]
    check(nats["replicas"] == 3, "NATS replicas %r", nats["replicas"])
    check(nats["podManagementPolicy"] == "Parallel", "NATS pods must start at once")
    headless = svcs[nats["serviceName"]]["spec"]
    check(headless.get("clusterIP") == "None" and headless.get("publishNotReadyAddresses"),
          "NATS Service %s: not headless, or hides pods that are not ready", nats["serviceName"])
    pod = nats["template"]["spec"]
    c = pod["containers"][0]
    conf_vol = [v for v in pod["volumes"] if "configMap" in v][0]
    conf = cms[conf_vol["configMap"]["name"]]["nats-server.conf"]
    routes = nats_routes(conf)
    want = ["%s-%d.%s:6222" % (sets["nats"]["metadata"]["name"], i, nats["serviceName"])
            for i in range(3)]
    check(sorted(routes) == want, "NATS routes %r, wanted %r", routes, want)
    env = container_env(docs, c)
    check(from_pod_name(env.get("NATS_SERVER_NAME")), "NATS_SERVER_NAME not the pod's name")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    claims = [t["metadata"]["name"] for t in nats["volumeClaimTemplates"]]
    check(mounts.get(claims[0]) == nats_setting(conf, "store_dir"),
          "the JetStream store %r is not on the volume %r", nats_setting(conf, "store_dir"),
          mounts)
    cfg_path = c["command"][c["command"].index("--config") + 1]
    check(os.path.dirname(cfg_path) == mounts.get(conf_vol["name"]),
          "--config %s is not in the ConfigMap's mount", cfg_path)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        check(c[probe]["httpGet"]["path"].startswith("/healthz") and
              ports.get(c[probe]["httpGet"]["port"]) == 8222, "NATS %s %r", probe, c[probe])
    check(c["readinessProbe"]["httpGet"]["path"] == "/healthz",
          "NATS readiness is not the full JetStream check")
    check("ldm" in " ".join(c["lifecycle"]["preStop"]["exec"]["command"]),
          "NATS stops without lame duck mode")
    lame = go_duration(nats_setting(conf, "lame_duck_duration")) + \
        go_duration(nats_setting(conf, "lame_duck_grace_period"))
    check(pod["terminationGracePeriodSeconds"] > lame, "NATS grace period %r <= lame duck %g",
          pod["terminationGracePeriodSeconds"], lame)
    # The copy keeps the settings of deploy/nats/nats-server.conf; only the
    # paths and routes differ.
    with open(NATS_CONF) as f:
        shipped = f.read()
    differ = ("store_dir", "max_file_store", "pid_file", "nats-route://")
    a = [l for l in strip_conf(shipped) if not l.startswith(differ)]
    b = [l for l in strip_conf(conf) if not l.startswith(differ)]
    check(a == b, "the ConfigMap's nats-server.conf drifted from deploy/nats/:\n%r\n%r", a, b)
    # neardupd: three nodes, named after their pods, on all three servers.
    sts = sets["neardup"]
    check(sts["spec"]["replicas"] == 3, "neardupd replicas %r", sts["spec"]["replicas"])
    env = check_neardup_statefulset(docs, sts, known)
    check(from_pod_name(env.get("NEARDUP_NODE_NAME")), "NEARDUP_NODE_NAME not the pod's name")
    urls = env["NEARDUP_NATS"].split(",")
    want = ["nats://%s-%d.%s:4222" % (sets["nats"]["metadata"]["name"], i, nats["serviceName"])
            for i in range(3)]
    check(urls == want, "NEARDUP_NATS %r, wanted %r", urls, want)
    check(ports.get("client") == 4222, "NATS client port %r", ports)
    # A PodDisruptionBudget of one for each StatefulSet.
    pdbs = find(docs, "PodDisruptionBudget")
    for name, s in sets.items():
        labels = s["spec"]["template"]["metadata"]["labels"]
        mine = [p for p in pdbs if all(labels.get(k) == v for k, v in
                                       p["spec"]["selector"]["matchLabels"].items())]
        check(len(mine) == 1 and mine[0]["spec"].get("maxUnavailable") == 1,
              "StatefulSet %s: PodDisruptionBudgets %r", name, mine)
    accepted({k: v for k, v in env.items() if isinstance(v, str)}, "the manifest's settings")
    if shutil.which("nats-server") is None:
        print("  nats-server is not installed: nats-server -t of the ConfigMap skipped")
        return
    tmp = tempfile.mkdtemp(prefix="neardup-nats-")
    try:
        path = os.path.join(tmp, "nats-server.conf")
        with open(path, "w") as f:
            f.write(conf)
        rc, out = nats_test(path, "nats-0")
        check(rc == 0, "nats-server -t of the ConfigMap's configuration failed:\n%s", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    T.run()
