#!/usr/bin/env python3
"""The build holds the layers (server/meson.build's table): each of the four
kinds of violation fails the build step that guards it, run exactly as the
build runs it (the command read from the build's own ninja file), and the
same step passes on the tree as committed.

- upward include: a store file includes the corpus's header;
- a path in an include: a core file includes "../api/api.h";
- a forbidden third-party header: a net file includes <lmdb.h>;
  (these three: check_layers.py, which every layer's library waits for,
  run on a copy of server/ with the line added);
- an upward prototype: an object of the core layer declares and calls an
  api function by hand; linked as the core's link check links it
  (-Wl,--no-undefined, the layers below core only), it does not link.

Needs ND_SOURCE_ROOT and ND_BUILD_ROOT (tests/meson.build); the link check
exists only in a build without the sanitizers (skipped there, exit 77 when
nothing could be checked)."""

import os
import shlex
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("ND_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("ND_BUILD_ROOT", os.path.join(SRC, "build"))

passed = failed = 0


def report(ok, name, detail):
    global passed, failed
    print("%s %s: %s" % ("ok  " if ok else "FAIL", name, detail))
    if ok:
        passed += 1
    else:
        failed += 1


def ninja_command(target):
    """The command the build runs to make target (the last of
    `ninja -t commands`), as a list, and the directory it runs in."""
    out = subprocess.run(["ninja", "-C", BUILD, "-t", "commands", target], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()
    if not out:
        raise RuntimeError("ninja has no command for %s" % target)
    return shlex.split(out[-1]), BUILD


def replace_arg(cmd, flag, value):
    cmd = list(cmd)
    cmd[cmd.index(flag) + 1] = value
    return cmd


def check_rules(tmp):
    """The three include rules, through check_layers.py as the build runs it."""
    cmd, cwd = ninja_command("server/layers_checked.h")
    cmd = replace_arg(cmd, "--stamp", os.path.join(tmp, "stamp.h"))
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    report(r.returncode == 0, "rules_hold_on_the_tree",
           "check_layers.py as the build runs it: exit %d %s" % (r.returncode, r.stderr.strip()))
    cases = [
        ("upward_include", "store/record.c", '#include "corpus.h"\n',
         "belongs to the layer corpus, which store may not use"),
        ("path_in_include", "core/json.c", '#include "../api/api.h"\n', "a path in an include"),
        ("forbidden_library", "net/http.c", "#include <lmdb.h>\n", "the layer net may not use lmdb"),
    ]
    for name, rel, line, want in cases:
        root = os.path.join(tmp, name, "server")
        shutil.copytree(os.path.join(SRC, "server"), root,
                        ignore=shutil.ignore_patterns("*.png", "node_modules"))
        path = os.path.join(root, rel)
        with open(path) as fh:
            text = fh.read()
        with open(path, "w") as fh:
            fh.write(line + text)
        r = subprocess.run(replace_arg(cmd, "--root", root), cwd=cwd, capture_output=True,
                           text=True)
        report(r.returncode != 0 and want in r.stderr and rel in r.stderr, name,
               "%s with %r: exit %d, %s" % (rel, line.strip(), r.returncode,
                                            r.stderr.strip().splitlines()[0] if r.stderr
                                            else "nothing said"))


def check_link(tmp):
    """An upward prototype in the core layer does not link."""
    target = "server/libndcore_linkcheck.so"
    try:
        cmd, cwd = ninja_command(target)
    except (subprocess.CalledProcessError, RuntimeError):
        print("skip upward_prototype: no %s in this build (the sanitizers' build has no link "
              "check)" % target)
        return False
    out = cmd.index("-o")
    so = os.path.join(tmp, "libndcore_linkcheck.so")
    control = replace_arg(cmd, "-o", so)
    r = subprocess.run(control, cwd=cwd, capture_output=True, text=True)
    report(r.returncode == 0, "core_links_alone",
           "the core's link check as the build runs it: exit %d %s" % (r.returncode,
                                                                        r.stderr.strip()[:300]))
    src = os.path.join(tmp, "upward.c")
    with open(src, "w") as fh:
        fh.write("/* a core file calling the api layer through a prototype of its own */\n"
                 "#include <stdbool.h>\n"
                 "bool nd_api_registered(void *r, const void *d);\n"
                 "bool nd_core_upward(void *r) { return nd_api_registered(r, 0); }\n")
    obj = os.path.join(tmp, "upward.o")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-fPIC", "-c", src, "-o", obj], check=True)
    bad = list(control)
    bad.insert(out, obj)
    r = subprocess.run(bad, cwd=cwd, capture_output=True, text=True)
    report(r.returncode != 0 and "nd_api_registered" in r.stderr, "upward_prototype",
           "the core's link check with an object calling nd_api_registered: exit %d, %s"
           % (r.returncode, next((x for x in r.stderr.splitlines() if "nd_api_registered" in x),
                                 r.stderr.strip()[:200])))
    return True


def main():
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        print("skip: no build.ninja in %s" % BUILD)
        return 77
    with tempfile.TemporaryDirectory(prefix="nd-layers-") as tmp:
        check_rules(tmp)
        check_link(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
