"""A reader for the subset of YAML that proto/openapi.yaml is written in, so
that the tests need only the standard library.

Supported: block mappings and sequences (indentation), "- key: value" items,
literal block scalars (| and |-), plain / 'single' / "double" quoted
scalars, flow sequences of scalars ([a, b]), {} and [], booleans, null,
integers and floats, full-line comments. Not supported (and not used in the
file): anchors, tags, folded scalars, inline comments, multi-line flow
collections, multi-document streams. test_openapi.py compares the result
with PyYAML when that is installed.
"""

import json
import re

_KEY = re.compile(r"""^('(?:[^']|'')*'|"(?:[^"\\]|\\.)*"|[^\s'"#\-][^:]*?|-[^\s:][^:]*?):(?: |$)""")
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")


class YamlError(ValueError):
    pass


def load(text):
    lines = []
    for raw in text.split("\n"):
        lines.append(raw.rstrip("\r"))
    parser = _Parser(lines)
    i = parser.skip(0)
    if i >= len(lines):
        return None
    value, i = parser.block(i, parser.indent(i))
    i = parser.skip(i)
    if i < len(lines):
        raise YamlError("unexpected content at line %d: %r" % (i + 1, lines[i]))
    return value


class _Parser:
    def __init__(self, lines):
        self.lines = lines

    @staticmethod
    def _blank(line):
        s = line.strip()
        return not s or s.startswith("#")

    def skip(self, i):
        while i < len(self.lines) and self._blank(self.lines[i]):
            i += 1
        return i

    def indent(self, i):
        line = self.lines[i]
        return len(line) - len(line.lstrip(" "))

    def block(self, i, indent):
        content = self.lines[i][indent:]
        if content == "-" or content.startswith("- "):
            return self.sequence(i, indent)
        return self.mapping(i, indent, None)

    def mapping(self, i, indent, first):
        """first: the content of a first line that is not lines[i] (a "- "
        item's rest), at indentation indent."""
        out = {}
        while True:
            if first is not None:
                content, first = first, None
                after = i  # the first line was the "- " line before i
            else:
                i = self.skip(i)
                if i >= len(self.lines) or self.indent(i) != indent:
                    break
                content = self.lines[i][indent:]
                if content.startswith("- ") or content == "-":
                    break
                after = i + 1
            m = _KEY.match(content)
            if not m:
                raise YamlError("expected 'key: value' at line %d: %r" % (i + 1, content))
            key = _scalar(m.group(1))
            if key in out:
                raise YamlError("duplicate key %r at line %d" % (key, i + 1))
            rest = content[m.end():].strip()
            out[key], i = self.value(rest, after, indent)
        return out, i

    def value(self, rest, i, indent):
        """The value after "key:" or "- " whose text on the line is rest; the
        following lines start at i. Returns (value, next line)."""
        if rest in ("|", "|-", "|+"):
            return self.literal(i, indent, rest)
        if rest:
            return _scalar(rest), i
        j = self.skip(i)
        if j < len(self.lines) and self.indent(j) > indent:
            return self.block(j, self.indent(j))
        if j < len(self.lines) and self.indent(j) == indent and \
                self.lines[j][indent:].startswith("- "):
            return self.sequence(j, indent)
        return None, i

    def sequence(self, i, indent):
        out = []
        while True:
            i = self.skip(i)
            if i >= len(self.lines) or self.indent(i) != indent:
                break
            content = self.lines[i][indent:]
            if not (content.startswith("- ") or content == "-"):
                break
            rest = content[2:].strip() if content != "-" else ""
            if rest and _KEY.match(rest) and not rest.startswith(("'", '"', "[", "{")):
                item, i = self.mapping(i + 1, indent + 2, rest)
            else:
                item, i = self.value(rest, i + 1, indent)
            out.append(item)
        return out, i

    def literal(self, i, indent, style):
        body = []
        block_indent = None
        j = i
        while j < len(self.lines):
            line = self.lines[j]
            if not line.strip():
                body.append("")
                j += 1
                continue
            ind = len(line) - len(line.lstrip(" "))
            if block_indent is None:
                if ind <= indent:
                    break
                block_indent = ind
            if ind < block_indent:
                break
            body.append(line[block_indent:])
            j += 1
        # Trailing blank lines belong to chomping, not to the next node.
        while body and body[-1] == "":
            body.pop()
            j -= 1
        text = "\n".join(body)
        if style == "|":
            text += "\n"
        return text, j


def _scalar(s):
    if s.startswith("'"):
        if not s.endswith("'") or len(s) < 2:
            raise YamlError("unterminated string %r" % s)
        return s[1:-1].replace("''", "'")
    if s.startswith('"'):
        return json.loads(s)
    if s == "[]":
        return []
    if s == "{}":
        return {}
    if s.startswith("[") and s.endswith("]"):
        return [_scalar(p.strip()) for p in s[1:-1].split(",") if p.strip()]
    if s.startswith("{") or s.startswith("["):
        raise YamlError("flow collections are not supported: %r" % s)
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if s in ("null", "Null", "NULL", "~"):
        return None
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s
