"""The container image's recipe, run on the host without a container engine
(the image itself is built and run with podman by CI's fresh-machine stage,
tests/fresh/run.sh container: health check, user, packages, volume):

- the Dockerfile is multi-stage on debian:bookworm-slim, and every RUN line
  is a step of deploy/container/build.sh;
- its runtime stage runs as a non-root user, keeps /var/lib/neardup as a
  volume, exposes the port neardupd listens on (0.0.0.0 inside), has a
  HEALTHCHECK on /healthz;
- the build stage's steps run here, in the same order, with the image's
  paths mapped to temporary ones: the release build installed under a
  DESTDIR, and check-runtime (the installed binaries run and load only
  libraries of deploy/container/runtime-packages.txt);
- the runtime stage's runtime-deps step runs (without --clean: this is not
  an image; it installs nothing when the packages are there); runtime-user
  is not run (it would add a user to this machine);
- the installed neardupd serves, and the image's health check command says
  healthy while it runs and unhealthy once it is gone."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SOURCE_ROOT, Runner, Server, check, neardupd_path  # noqa: E402

T = Runner("test_container")
DOCKERFILE = os.path.join(SOURCE_ROOT, "Dockerfile")
SCRIPT = os.path.join(SOURCE_ROOT, "deploy", "container", "build.sh")


def instructions():
    """[(stage index, INSTRUCTION, argument text)], continuation lines joined."""
    with open(DOCKERFILE) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            stage += 1
        out.append((stage, word, rest.strip()))
    return out


def run_steps():
    """[(stage, [argv])] of the RUN lines: each && part must call build.sh."""
    steps = []
    for stage, word, rest in instructions():
        if word != "RUN":
            continue
        for part in rest.split("&&"):
            argv = shlex.split(part)
            if argv[:2] == ["rm", "-rf"]:
                continue
            check(len(argv) >= 3 and argv[0] == "bash" and argv[1].endswith("build.sh"),
                  "Dockerfile RUN is not a step of deploy/container/build.sh: %r", part)
            steps.append((stage, argv[2:]))
    return steps


@T.test
def dockerfile_shape():
    ins = instructions()
    froms = [rest for _, w, rest in ins if w == "FROM"]
    check(len(froms) == 2, "stages: %r", froms)
    check(all(f.split()[0] == "debian:bookworm-slim" for f in froms), froms)
    last = max(s for s, _, _ in ins)
    rt = {}
    for s, w, rest in ins:
        if s == last:
            rt.setdefault(w, []).append(rest)
    user = rt["USER"][-1].split(":")[0]
    check(user not in ("root", "0"), "runs as %r", user)
    with open(SCRIPT) as f:
        uid = re.search(r"^NEARDUP_UID=(\d+)", f.read(), re.M).group(1)
    check(user in (uid, "neardup"), "USER %r is not build.sh's user %s", user, uid)
    check(any("/var/lib/neardup" in v for v in rt["VOLUME"]), rt["VOLUME"])
    env = " ".join(rt["ENV"])
    m = re.search(r"NEARDUP_LISTEN=0\.0\.0\.0:(\d+)", env)
    check(m, "not listening on 0.0.0.0: %r", env)
    check("NEARDUP_DATA=/var/lib/neardup" in env, env)
    check(any(m.group(1) in v.split() for v in rt["EXPOSE"]), "EXPOSE %r, port %s",
          rt["EXPOSE"], m.group(1))
    check("/usr/libexec/neardup/healthcheck" in rt["HEALTHCHECK"][-1], rt["HEALTHCHECK"])
    check('"/usr/bin/neardupd"' in rt["ENTRYPOINT"][-1], rt["ENTRYPOINT"])
    steps = [(s, a[0]) for s, a in run_steps()]
    check(steps == [(0, "build-deps"), (0, "build"), (0, "check-runtime"),
                    (1, "runtime-deps"), (1, "runtime-user")], "steps %r", steps)


def build_root():
    """The meson build directory these tests run from (holds the recipe's
    own build, so a second run is incremental)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(neardupd_path())))


@T.test
def recipe_runs_and_the_result_serves():
    tmp = tempfile.mkdtemp(prefix="neardup-container-")
    mapping = {"/src": SOURCE_ROOT, "/out": os.path.join(tmp, "out"),
               "/tmp/build": os.path.join(build_root(), "container-recipe")}
    try:
        for stage, argv in run_steps():
            step = argv[0]
            if step == "runtime-user":
                print("  not run: runtime-user (would add the user neardup to this machine)")
                continue
            args = [mapping.get(a, a) for a in argv if a != "--clean"]
            t0 = time.monotonic()
            p = subprocess.run(["bash", SCRIPT] + args, capture_output=True, text=True,
                               timeout=1200, cwd=SOURCE_ROOT)
            print("  build.sh %s: exit %d, %.1fs" % (" ".join(argv), p.returncode,
                                                   time.monotonic() - t0))
            check(p.returncode == 0, "build.sh %s failed:\n%s\n%s", " ".join(args),
                  p.stdout[-3000:], p.stderr[-3000:])
            if step == "check-runtime":
                print("  " + p.stdout.strip().splitlines()[-1])
        out = mapping["/out"]
        daemon = os.path.join(out, "usr", "bin", "neardupd")
        health = os.path.join(out, "usr", "libexec", "neardup", "healthcheck")
        for f in (daemon, os.path.join(out, "usr", "bin", "neardup"), health):
            check(os.access(f, os.X_OK), "not installed: %s", f)
        ver = subprocess.run([daemon, "--version"], capture_output=True, text=True, timeout=10)
        check(ver.returncode == 0 and ver.stdout.startswith("neardupd "), ver)
        # The installed binary serves; the health check follows it.
        os.environ["NEARDUPD"] = daemon
        srv = Server(threads=1)
        try:
            srv.start()
            env = dict(os.environ, NEARDUP_LISTEN="0.0.0.0:%d" % srv.port)
            p = subprocess.run([health], env=env, timeout=10)
            check(p.returncode == 0, "healthcheck says unhealthy for a live server")
            status, body = srv.json("POST", "/fingerprint", {"text": "hello container"})
            check(status == 200 and len(body["simhash"]) == 16, body)
            check(srv.stop() == 0, "exit code")
            p = subprocess.run([health], env=env, timeout=10, stderr=subprocess.DEVNULL)
            check(p.returncode != 0, "healthcheck says healthy with nothing listening")
        finally:
            srv.cleanup()
    finally:
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    T.run()
