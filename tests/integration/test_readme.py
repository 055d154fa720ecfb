"""README.md's examples run, and say what the server says.

Every ```sh block of README.md is run, in order, in one bash session against a
real neardupd on a free loopback port, unless an HTML comment right before it
says otherwise; each shown answer is compared with the real one. The
convention, also in README.md ("The examples are tested"):

- `<!-- example: not run: WHY -->` before a ```sh block: not run (installs,
  deployment, tools that need more than the server). Every other ```sh block
  runs; a shell block fenced as bash, shell or console is refused, so none
  escapes by its name.
- `<!-- example: starts the server -->` before a ```sh block: the block's
  `./build/server/neardupd ...` command (after the last `&&`) is how the
  server runs from here on: the test stops the one it runs and starts that
  command, on the same data directory, listening on a free port.
- The ```json or ```text block right after a run block (nothing but blank
  lines between) is its shown answer. A json answer holds one JSON value per
  value printed (so `-w ' %{http_code}\\n'` after a body shows the status as
  the next value); it is compared field by field: the same keys, the same
  number of items, equal values, except for placeholders, strings written
  `"<time>"` (an RFC 3339 UTC time with microseconds), `"<hex16>"` (16
  lowercase hex digits), `"<number>"` (any number >= 0: durations) and
  `"<text of PATH>"` (the contents of the file PATH). A text answer is
  compared line by line; `<time>`, `<hex16>` and `<number>` may stand in a
  line. A run block without an answer must succeed and may print anything.
- Commands run from a scratch directory holding `docs` (this repository's)
  and `build` (the build under test); `localhost:8080` and `127.0.0.1:8080`
  in a command become the test server's address. A command that fails (a
  non-zero status, in a pipe too) fails the test.

Every difference is reported with its README line and a diff of the shown
and the real answer (volatile values matched by a placeholder shown as the
placeholder). ND_README=PATH tests another copy of the README (the same
docs/examples); ND_README_SHOW=1 prints every real answer in the README's
layout, for writing new examples. Also: the README starts with its two
commands as tests/fresh/run.sh reads them, and each JSON body of
docs/examples/ holds the text of its .txt file there (docs/examples/make.py
writes both)."""

import difflib
import json
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

T = Runner("test_readme")
for _name in ("NEARDUPD", "NEARDUP"):  # the blocks run elsewhere: absolute paths
    if os.environ.get(_name):
        os.environ[_name] = os.path.abspath(os.environ[_name])
README = os.path.abspath(os.environ.get("ND_README") or os.path.join(SOURCE_ROOT, "README.md"))
EXAMPLES = os.path.join(SOURCE_ROOT, "docs", "examples")
SHOW = os.environ.get("ND_README_SHOW") == "1"
BLOCK_TIMEOUT = 60.0

FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
SERVER_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):8080\b")
PLACEHOLDERS = {
    "<time>": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z",
    "<hex16>": r"[0-9a-f]{16}",
    "<number>": r"[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?",
}


# ---- the README's blocks ----

class Block:
    def __init__(self, line, info, body, marker):
        self.line = line  # 1-based line of the opening fence
        self.info = info
        self.body = body
        self.marker = marker  # the example: comment's words, or None
        self.kind = None  # run, server, skip, answer, other
        self.answer = None  # the answer block of a run block

    def where(self):
        return "%s:%d" % (os.path.basename(README), self.line)


def parse(text):
    """The fenced blocks, each with the example: marker right before it
    (only blank lines between). Raises on a marker that no block follows."""
    blocks = []
    lines = text.split("\n")
    i = 0
    marker = None
    marker_line = 0
    blank_since_block = True  # only blank lines since the previous block
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            check(marker is None, "%s:%d: two example: markers in a row", README, i + 1)
            marker, marker_line = m.group(1), i + 1
            i += 1
            continue
        f = FENCE.match(line)
        if f:
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            check(i < len(lines), "%s:%d: a fence that never closes", README, start + 1)
            blk = Block(start + 1, f.group(1), "\n".join(body) + "\n", marker)
            blk.follows_block = blank_since_block and bool(blocks)
            blocks.append(blk)
            marker = None
            blank_since_block = True
            i += 1
            continue
        if line.strip():
            check(marker is None, "%s:%d: the example: marker of line %d is not right "
                  "before a fenced block", README, i + 1, marker_line)
            blank_since_block = False
        i += 1
    check(marker is None, "%s:%d: a marker at the end", README, marker_line)
    return blocks


def classify(blocks):
    """Sets each block's kind and its answer; raises on what breaks the
    convention (see the module's docstring)."""
    prev = None
    for b in blocks:
        if b.info in ("bash", "shell", "console", "shell-session", "zsh"):
            raise AssertionError("%s: a ```%s block: fence shell commands as ```sh, so that "
                                 "the README test runs them or a marker says why not"
                                 % (b.where(), b.info))
        if b.info == "sh":
            if b.marker is None:
                b.kind = "run"
            elif b.marker == "starts the server":
                b.kind = "server"
            elif b.marker.startswith("not run:") and b.marker[len("not run:"):].strip():
                b.kind = "skip"
            else:
                raise AssertionError("%s: unknown marker %r (not run: WHY, or starts the server)"
                                     % (b.where(), b.marker))
        elif (prev is not None and prev.kind == "run" and b.follows_block and
              b.info in ("json", "text") and b.marker is None):
            b.kind = "answer"
            prev.answer = b
        else:
            check(b.marker is None, "%s: a marker before a ```%s block (markers are for sh "
                  "blocks)", b.where(), b.info)
            b.kind = "other"
        prev = b
    return blocks


def readme_blocks():
    with open(README, encoding="utf-8") as f:
        return classify(parse(f.read()))


# ---- answers compared ----

def placeholder_matches(expected, actual):
    """True when the string expected is a placeholder actual fits."""
    if expected in ("<time>", "<hex16>"):
        return isinstance(actual, str) and re.fullmatch(PLACEHOLDERS[expected], actual)
    if expected == "<number>":
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and actual >= 0
    m = re.fullmatch(r"<text of (\S+)>", expected)
    if m:
        with open(os.path.join(SOURCE_ROOT, m.group(1)), encoding="utf-8") as f:
            return actual == f.read()
    return None  # not a placeholder


def same_kind(a, b):
    def kind(v):
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "number"
        return type(v).__name__
    return kind(a) == kind(b)


def shown_form(expected, actual):
    """actual with every value a placeholder of expected matches replaced by
    that placeholder and its keys in expected's order (the others after):
    what the README would show, so that a diff shows only differences."""
    if isinstance(expected, str) and isinstance(actual, (str, int, float)) and \
            placeholder_matches(expected, actual):
        return expected
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = {}
        for k in expected:
            if k in actual:
                out[k] = shown_form(expected[k], actual[k])
        for k in actual:
            if k not in out:
                out[k] = actual[k]
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        return [shown_form(e, a) for e, a in zip(expected, actual)] + actual[len(expected):]
    return actual


def differences(expected, actual, path="$"):
    """The places where actual is not what expected shows."""
    if isinstance(expected, str) and placeholder_matches(expected, actual) is not None:
        return [] if placeholder_matches(expected, actual) else \
            ["%s: %r does not fit %s" % (path, actual, expected)]
    if not same_kind(expected, actual):
        return ["%s: shown %r, the server says %r" % (path, expected, actual)]
    if isinstance(expected, dict):
        out = []
        for k in expected:
            if k not in actual:
                out.append("%s.%s: shown, the server does not say it" % (path, k))
        for k in actual:
            if k not in expected:
                out.append("%s.%s: the server says %s, not shown" % (path, k,
                                                                      json.dumps(actual[k])[:80]))
        for k in expected:
            if k in actual:
                out += differences(expected[k], actual[k], "%s.%s" % (path, k))
        return out
    if isinstance(expected, list):
        out = []
        if len(expected) != len(actual):
            out.append("%s: %d items shown, the server says %d" % (path, len(expected),
                                                                   len(actual)))
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += differences(e, a, "%s[%d]" % (path, i))
        return out
    if expected != actual:
        return ["%s: shown %s, the server says %s" % (path, json.dumps(expected),
                                                     json.dumps(actual))]
    return []


def json_values(text):
    """The JSON values in text, one after another (white space between)."""
    dec = json.JSONDecoder()
    out = []
    i = 0
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i >= len(text):
            return out
        value, i = dec.raw_decode(text, i)
        out.append(value)


def layout(value, col=0, width=92):
    """JSON as the README shows answers: compact where it fits, members
    packed onto lines of at most width characters; a member that takes
    several lines starts a line, under its object's first member."""
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if col + len(flat) <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    if isinstance(value, list):
        parts = [layout(v, col + 1, width) for v in value]
        opening, closing = "[", "]"
    else:
        parts = []
        for k, v in value.items():
            key = json.dumps(k, ensure_ascii=False) + ": "
            parts.append(key + layout(v, col + 1 + len(key), width))
        opening, closing = "{", "}"
    lines = []
    cur = opening
    cur_col = col  # where cur starts: col on the first line, 0 after
    after_multi = False
    for i, p in enumerate(parts):
        multi = "\n" in p
        if i == 0:
            cur += p
        elif not multi and not after_multi and \
                cur_col + len(cur) + 2 + len(p) + 1 <= width:
            cur += ", " + p
        else:
            lines.append(cur + ",")
            cur = " " * (col + 1) + p
            cur_col = 0
        if multi:
            more = cur.split("\n")
            lines += more[:-1]
            cur = more[-1]
            cur_col = 0
        after_multi = multi
    lines.append(cur + closing)
    return "\n".join(lines)


def layout_lines(value, indent=0, width=96):
    """JSON one member a line (an object or array that fits on one line
    stays on it): the form diffs are made in."""
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if len(flat) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = ["%s%s: %s" % (pad, json.dumps(k, ensure_ascii=False),
                               layout_lines(v, indent + 2, width)) for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + layout_lines(v, indent + 2, width) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def compare_json(answer, out):
    """'' when out says what the json answer block shows, else the report."""
    try:
        shown = json_values(answer.body)
    except ValueError as e:
        return "the shown answer is not JSON: %s" % e
    try:
        real = json_values(out)
    except ValueError as e:
        return "the server's answer is not JSON (%s):\n%s" % (e, out[-3000:])
    diffs = []
    if len(shown) != len(real):
        diffs.append("%d values shown, %d printed" % (len(shown), len(real)))
    for i, (e, a) in enumerate(zip(shown, real)):
        diffs += differences(e, a, "$%d" % (i + 1) if len(shown) > 1 else "$")
    if not diffs:
        return ""
    want = "\n".join(layout_lines(v) for v in shown).splitlines()
    got = "\n".join(layout_lines(shown_form(e, a)) for e, a in zip(shown, real)) + \
        "".join("\n" + layout_lines(a) for a in real[len(shown):])
    diff = difflib.unified_diff(want, got.splitlines(), "shown in the README",
                                "what the server says", lineterm="", n=2)
    return "\n".join(diffs[:12]) + "\n" + "\n".join(diff)


def text_line_pattern(line):
    pat = re.escape(line.rstrip())
    for name, rx in PLACEHOLDERS.items():
        pat = pat.replace(re.escape(name), rx)
    return re.compile(pat + r"\Z")


def compare_text(answer, out):
    want = answer.body.rstrip("\n").split("\n")
    got = out.rstrip("\n").split("\n")
    ok = len(want) == len(got) and all(text_line_pattern(w).match(g.rstrip())
                                       for w, g in zip(want, got))
    if ok:
        return ""
    shown_got = [w if i < len(want) and text_line_pattern(w).match(g.rstrip()) else g
                 for i, (w, g) in enumerate(zip(want + [""] * len(got), got))]
    return "\n".join(difflib.unified_diff(want, shown_got, "shown in the README",
                                          "what the command prints", lineterm="", n=2))


# ---- the shell session and the server ----

class Session:
    """One bash process the blocks are sourced into, in order, so that what
    one block sets (a token in a variable, umask) holds for the next."""

    def __init__(self, work):
        self.work = work
        self.n = 0
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": work,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=work, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, text=True)

    def run(self, script):
        """Runs script; returns (stdout, stderr, the failed commands)."""
        self.n += 1
        base = os.path.join(self.work, ".blk%d" % self.n)
        with open(base + ".sh", "w", encoding="utf-8") as f:
            f.write(script)
        # The ERR trap names every command that fails, pipes included
        # (pipefail), without ending the session.
        self.proc.stdin.write(
            "set -o pipefail; trap 'printf \"%%s (exit %%s)\\n\" \"$BASH_COMMAND\" $? >> %s.fail' ERR\n"
            "source %s.sh > %s.out 2> %s.err < /dev/null\n"
            "trap - ERR; : > %s.done\n" % ((shlex.quote(base),) * 5))
        self.proc.stdin.flush()
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while not os.path.exists(base + ".done"):
            check(self.proc.poll() is None, "the shell ended (an exit in a block?)")
            check(time.monotonic() < deadline, "the block ran for more than %.0f s" %
                  BLOCK_TIMEOUT)
            time.sleep(0.01)

        def read(ext):
            try:
                with open(base + ext, encoding="utf-8", errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""
        return read(".out"), read(".err"), read(".fail")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def server_command(block):
    """The flags of the block's ./build/server/neardupd command."""
    for part in reversed(re.split(r"&&|\n", block.body)):
        words = shlex.split(part, comments=True)
        if words and words[0] in ("./build/server/neardupd", "build/server/neardupd"):
            return words[1:]
    raise AssertionError("%s: starts the server, but holds no ./build/server/neardupd command"
                         % block.where())


def start_server(block, old):
    """The server the block's command starts (data directory and all), on a
    free port, after old (if any) stopped."""
    if old is not None:
        old.stop()
        old.check_sanitizers()
        old.cleanup()
    args = server_command(block)
    data = "./data"
    rest = []
    i = 0
    while i < len(args):
        if args[i] == "--data" and i + 1 < len(args):
            data = args[i + 1]
            i += 2
            continue
        if args[i].startswith("--data="):
            data = args[i][len("--data="):]
        else:
            rest.append(args[i])
        i += 1
    check(not any(a.startswith("--listen") for a in rest),
          "%s: --listen in the README's command (the test picks the port)" % block.where())
    srv = Server(rest, data_dir=data)
    srv.start()
    return srv


def make_workdir():
    work = tempfile.mkdtemp(prefix="nd-readme-")
    os.symlink(os.path.join(SOURCE_ROOT, "docs"), os.path.join(work, "docs"))
    build = os.path.dirname(os.path.dirname(os.path.abspath(neardupd_path())))
    os.symlink(build, os.path.join(work, "build"))
    return work


# ---- the tests ----

@T.test
def starts_with_its_two_commands():
    """The first two blocks are the README's two commands, each a single line
    in a ```sh block as tests/fresh/run.sh extracts them (the first after
    "Set up and run the server", the second after "Set up and run all
    tests"), and the first is how the tests below start the server."""
    blocks = readme_blocks()
    with open(README, encoding="utf-8") as f:
        text = f.read()
    first, second = blocks[0], blocks[1]
    for b, title in ((first, "Set up and run the server"), (second, "Set up and run all tests")):
        check(b.info == "sh", "%s: the README starts with a ```%s block" % (b.where(), b.info))
        at = text.find(title)
        check(0 <= at and text.count("\n", 0, at) + 1 < b.line,
              "%r is not said before %s" % (title, b.where()))
        lines = [ln for ln in b.body.splitlines() if ln.strip() and not ln.startswith("#")]
        check(len(lines) == 1, "%s: %d lines; tests/fresh/run.sh takes a single command"
              % (b.where(), len(lines)))
    check("bash deploy/install-deps.sh" in first.body and "neardupd" in first.body and
          first.kind == "server", "%s: the first command is not the server's (install-deps "
          "... neardupd) marked 'starts the server'" % first.where())
    check(second.body.strip() == "bash tests/run-all.sh" and second.kind == "skip",
          "%s: the second command is not 'bash tests/run-all.sh' marked not run" % second.where())


@T.test
def example_bodies_hold_their_texts():
    """Every JSON body of docs/examples/ (a request, or a line of an
    archive) holds its texts exactly as one of the .txt files there, so the
    two cannot drift (docs/examples/make.py writes both)."""
    texts = {}
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".txt"):
            with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
                texts[f.read()] = name
    n = files = 0
    for name in sorted(os.listdir(EXAMPLES)):
        if not name.endswith((".json", ".jsonl")):
            continue
        files += 1
        with open(os.path.join(EXAMPLES, name), encoding="utf-8") as f:
            values = json_values(f.read())
        for v in values:
            for key in ("text", "text_a", "text_b"):
                if key in v and len(v[key]) >= 300:
                    check(v[key] in texts, "docs/examples/%s: its %s is none of the .txt files "
                          "(run docs/examples/make.py)" % (name, key))
                    n += 1
    for text, name in texts.items():
        check(len(text) >= 300, "docs/examples/%s: %d characters (the server judges 300 or "
              "more)" % (name, len(text)))
    print("     %d texts in %d body files, %d .txt files" % (n, files, len(texts)))


@T.test
def readme_runs_as_shown():
    blocks = readme_blocks()
    counts = {k: 0 for k in ("run", "server", "skip", "answer", "other")}
    for b in blocks:
        counts[b.kind] += 1
    check(blocks and blocks[0].kind == "server", "the first block does not start the server")
    work = make_workdir()
    old_cwd = os.getcwd()
    os.chdir(work)  # the server's relative --data and the commands' paths
    session = Session(work)
    srv = None
    failures = []
    t0 = time.monotonic()
    try:
        for b in blocks:
            if b.kind == "server":
                try:
                    srv = start_server(b, srv)
                except Exception as e:  # noqa: BLE001 - reported with the others
                    failures.append("%s: the server did not start: %s" % (b.where(), e))
                    break
                continue
            if b.kind != "run":
                continue
            script = SERVER_ADDRESS.sub("127.0.0.1:%d" % srv.port, b.body)
            try:
                out, err, failed = session.run(script)
            except AssertionError as e:
                failures.append("%s: %s\n%s" % (b.where(), e, b.body))
                break
            if failed:
                failures.append("%s: a command failed:\n%s%s\nstderr: %s\nserver log:\n%s" % (
                    b.where(), failed, b.body, err[-2000:], srv.log_tail(8)))
                continue
            if SHOW:
                print("---- %s\n%s" % (b.where(), b.body.rstrip()))
                try:
                    print("\n".join(layout(v) for v in json_values(out)))
                except ValueError:
                    print(out.rstrip())
            if b.answer is None:
                continue
            report = (compare_json if b.answer.info == "json" else compare_text)(b.answer, out)
            if report:
                failures.append("%s: the answer shown at line %d is not what the server says:"
                                "\n%s\n%s" % (b.where(), b.answer.line, b.body.rstrip(), report))
    finally:
        session.close()
        os.chdir(old_cwd)
        if srv is not None:
            try:
                srv.stop()
                srv.check_sanitizers()
            finally:
                srv.cleanup()
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(work, ignore_errors=True)
    print("     %(run)d blocks run (%(answer)d with an answer), %(server)d server starts, "
          "%(skip)d marked not run, %(other)d other blocks" % counts)
    print("     %.1f s" % (time.monotonic() - t0))
    check(not failures, "%d of the README's examples do not hold:\n\n%s" % (
        len(failures), "\n\n".join(failures)))


if __name__ == "__main__":
    T.run()
