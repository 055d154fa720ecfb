"""The deployment files agree with neardupd and with each other:

- deploy/neardupd.env lists every setting of `neardupd --help`, each with
  the default --help prints (commented) or a value that parses, and so does
  the settings table of README.md's Operations section;
- deploy/kubernetes/neardup.yaml: a StatefulSet with a volume at the data
  directory, liveness on /healthz, readiness on /readyz, the container port
  of NEARDUP_LISTEN, a non-root user, and a termination grace period longer
  than NEARDUP_DRAIN_DELAY + NEARDUP_DRAIN_TIMEOUT;
- the systemd units stop later than the drain of the environment file.

test_systemd.py runs systemd-analyze, test_haproxy.py the HAProxy file,
test_container.py the Dockerfile's recipe."""

import os
import re
import subprocess
import sys

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


def manifests():
    with open(os.path.join(DEPLOY, "kubernetes", "neardup.yaml")) as f:
        text = f.read()
    docs = [yaml.safe_load(d) for d in re.split(r"(?m)^---\s*$", text)]
    return [d for d in docs if d]


def find(docs, kind):
    got = [d for d in docs if d.get("kind") == kind]
    check(len(got) >= 1, "no %s in the Kubernetes manifests", kind)
    return got


@T.test
def kubernetes_statefulset():
    docs = manifests()
    sts = find(docs, "StatefulSet")[0]
    cm = {d["metadata"]["name"]: d["data"] for d in find(docs, "ConfigMap")}
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    env = {}
    for src in c.get("envFrom", []):
        env.update(cm[src["configMapRef"]["name"]])
    for e in c.get("env", []):
        env[e["name"]] = e["value"]
    known = help_settings()
    for k in env:
        check(k in known, "the manifest sets %s, which neardupd does not know", k)
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
    for svc in svcs.values():
        for k, v in svc["spec"]["selector"].items():
            check(labels.get(k) == v, "Service %s selects %s=%s", svc["metadata"]["name"], k, v)


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


if __name__ == "__main__":
    T.run()
