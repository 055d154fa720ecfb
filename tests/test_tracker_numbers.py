#!/usr/bin/env python3
"""No tracker numbers in the tree: a comment, docstring, message or document
says what it means, not which ticket it came from ("the replica contract",
not the number of the issue that asked for it). The history keeps those.

Fails when a tracked file (git ls-files; without git, every file under the
root but build*/, data/, node_modules/ and .git/) holds the tracker's word
(singular or plural, any case) followed by a number, with or without "#",
or with the number on the next line of a comment (PLANTED_BAD below).
"HTTP 409", "RFC 9110", "UTS #39" and "appeal #12" are not tracker numbers
and pass.
Before checking the tree, the pattern is run on planted lines and must
flag the bad ones and pass the good ones, so a pattern that stopped
matching fails too.

    python3 tests/test_tracker_numbers.py  (ND_SOURCE_ROOT: the tree; default ..)
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.environ.get("ND_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = re.compile(r"^(build.*|data|node_modules|\.git)$")
WORD = "iss" + "ue"  # spelled apart: this file holds no tracker number itself
TRACKER = re.compile(
    r"\b[Ii]" + WORD[1:] + r"s?[ \t]*"           # the word, singular or plural
    r"(?:\n[ \t]*(?:#|//|\*|--|;)?[ \t]*)?"      # its number on the next comment line
    r"(?:#|[Nn]o\.?[ \t]*)?[0-9]+\b")            # "#51", "no. 51" or "51"

PLANTED_BAD = [
    "The replica contract (%s 14)." % WORD,
    "%s 51: a node behind answered" % WORD.capitalize(),
    "see %s #53, item 1" % WORD,
    "%ss 12 and 16" % WORD.capitalize(),
    "# the developer's loop (%s\n# 57): builds" % WORD,
]
PLANTED_GOOD = [
    "409 (HTTP 409 Conflict, RFC 9110)",
    "ICU's UTS #39 skeletons, UAX #9",
    '{"reason": "appeal #12: licensed text"}',
    "no %s at all; %ss in 3 places" % (WORD, WORD),
    "the %s's targets: <= 250 B/doc" % WORD,
]


def tracked_files():
    """The files to read, relative to ROOT."""
    if os.path.isdir(os.path.join(ROOT, ".git")) and shutil.which("git"):
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True,
                             stdout=subprocess.PIPE).stdout
        return [p for p in out.decode().split("\0")
                if p and not any(SKIP_DIRS.match(part) for part in p.split("/")[:-1])]
    files = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not SKIP_DIRS.match(d)]
        files += [os.path.relpath(os.path.join(top, n), ROOT) for n in names]
    return files


def hits(text):
    """(line, matched text) of each tracker number in text."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0).replace("\n", " "))
            for m in TRACKER.finditer(text)]


def main():
    failed = 0
    for line in PLANTED_BAD:
        if not hits(line):
            print("planted tracker number not caught: %r" % line)
            failed += 1
    for line in PLANTED_GOOD:
        if hits(line):
            print("legitimate text flagged: %r" % line)
            failed += 1
    files = tracked_files()
    for rel in files:
        path = os.path.join(ROOT, rel)
        if not os.path.isfile(path):
            continue  # deleted in the work tree, or a submodule
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue  # binary
        for line, what in hits(data.decode("utf-8", "replace")):
            print("%s:%d: a tracker number: %r" % (rel, line, what))
            failed += 1
    if failed:
        print("tracker numbers: %d found (say what is meant instead)" % failed)
        return 1
    print("tracker numbers: none in %d files" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
