#!/usr/bin/env python3
"""Writes the derived texts and the JSON request bodies of docs/examples/ from
the five articles written for it (night-ferry.txt, city-notes.txt,
ferry-rewrite.txt, library-hours.txt, tea-house.txt). The outputs are
committed, so a reader needs neither python3 nor opencc: run this only after
changing an article (it needs Debian's opencc for the Traditional copy), then
update README.md's shown answers (tests/integration/test_readme.py says
which). test_readme checks that every body's text equals its file."""

import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def read(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        return f.read()


def write(name, text):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        f.write(text)


def body(name, obj):
    """One request body: compact JSON, UTF-8 as it is, one line."""
    write(name, json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")) + "\n")


ferry = read("night-ferry.txt")
city = read("city-notes.txt")
paras = ferry.split("\n\n")

# A re-post of the first half of the English article (its title and two of
# its four paragraphs) under a footer of the re-poster's.
half = "\n\n".join(paras[:3]) + "\n\nReposted from the Harbour Gazette. Share it with a friend " \
    "who still takes the last boat home.\n"
write("ferry-first-half.txt", half)

# The English article lightly edited (a word here and there) under another
# title, with a site's footer: bob's re-post in the workflow.
edited = ferry.replace("The Night Ferry", "Saving the Night Ferry", 1) \
    .replace("nobody expected much of a fight", "few expected much of a fight") \
    .replace("surprised everyone", "surprised almost everyone") \
    .rstrip("\n") + "\n\nFound on the Harbour Gazette website.\n"
write("ferry-repost.txt", edited)

# The Chinese article as a re-poster hides it: converted to Traditional
# characters (OpenCC s2t), a zero-width space after every 12th character of
# each paragraph, and the Latin words App and WeChat spelled with
# Cyrillic р, е and а.
trad = subprocess.run(["opencc", "-c", "s2t.json"], input=city, capture_output=True,
                      text=True, check=True).stdout
out = []
for line in trad.split("\n"):
    out.append("".join(c + ("\u200b" if i % 12 == 11 else "") for i, c in enumerate(line)))
write("city-notes-disguised.txt", "\n".join(out).replace("App", "A\u0440p")
      .replace("WeChat", "W\u0435Ch\u0430t"))

# Two of the Chinese article's paragraphs under a re-poster's header and
# footer.
cparas = city.split("\n\n")
write("city-notes-excerpt.txt", "转载自「城市笔记」公众号\n\n" + "\n\n".join(cparas[2:4]) +
      "\n\n（本文转载自网络，如有侵权请联系删除）\n")

body("register-night-ferry.json", {"id": "a-1", "account": "alice", "register": True,
                                   "meta": {"title": "The Night Ferry"}, "text": ferry})
body("check-first-half.json", {"text": half})
body("check-rewrite.json", {"text": read("ferry-rewrite.txt")})
body("register-city-notes.json", {"id": "a-2", "account": "chen", "register": True,
                                  "meta": {"title": "城市笔记"}, "text": city})
body("check-disguised.json", {"text": read("city-notes-disguised.txt")})
body("compare-excerpt.json", {"text_a": read("city-notes-excerpt.txt"), "id_b": "a-2"})
body("reregister-night-ferry.json", {"id": "a-1", "account": "bob", "register": True,
                                     "meta": {"title": "The Night Ferry"}, "text": ferry})
body("check-bob.json", {"id": "b-7", "account": "bob", "text": edited})
body("check-carol.json", {"id": "c-1", "account": "carol", "text": edited})

# A day-one archive: two originals of 2025, a re-post of one a month later,
# and a line too short to judge.
lib = read("library-hours.txt")
tea = read("tea-house.txt")
repost = lib.replace("Winter Hours", "Library Winter Hours", 1).rstrip("\n") + \
    "\n\nShared from the library's notice board.\n"
write("library-hours-repost.txt", repost)
lines = [
    {"id": "arc-1", "account": "dora", "registered_at": "2025-11-20T09:00:00Z",
     "meta": {"title": "Winter Hours at the Harbour Library"}, "text": lib},
    {"id": "arc-2", "account": "wang", "registered_at": "2025-06-02T07:30:00Z",
     "meta": {"title": "老街茶馆"}, "text": tea},
    {"id": "arc-3", "account": "erik", "registered_at": "2025-12-01T12:00:00Z",
     "text": repost},
    {"id": "arc-4", "account": "erik", "registered_at": "2025-12-02T12:00:00Z",
     "text": "Closed today for a staff training day."},
]
write("archive.jsonl", "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in lines))
