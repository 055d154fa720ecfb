"""The review console (/console/) in a real browser: Debian's chromium,
headless, driven by chromedriver through python3-selenium, against the real
neardupd on loopback with an operator token.

What it asserts:
- the page's headers: a strict Content-Security-Policy, nosniff, no
  Referer, its Content-Type, ETag and 304; the files served are the files
  of server/console/ byte for byte; 404/405/301 as JSON; --console=false
  and NEARDUP_CONSOLE=false turn it off (404 JSON);
- the token typed into the page is kept in sessionStorage only and sent
  as a bearer token (a registration through the page is recorded under it);
- a copy (Chinese with emoji: code points are not UTF-16 units) checked
  through the page: verdict, action and every match's figures as the JSON
  answer has them; the highlighted spans (their text, and their code-point
  offsets computed from the DOM) equal the answer's passage pairs on both
  sides (the registered text from GET /documents/{id}?text=true);
  clicking one scrolls to and flashes its partner;
- revoke and restore through the page (the reason typed, Enter submits),
  the audit entries shown by the page and returned by GET /audit;
- hostile ids, texts and meta (<script>, "onerror=, <img onerror>, a
  javascript: URL, U+202E): nothing runs, nothing is injected, the text
  shows literally, isolated in <bdi>;
- the copied share as people read it ("99 % of this text is found in 2
  sources", a bar) and each source's share and kind in words, equal to
  the answer's copied_share and share: a splice of two registered articles
  (a compilation) and an original quoting one (quoted), without overlap at
  1400 and 390 px;
- recent detections, newest first, paged, as GET /events lists them;
- an original's copies paged; its text loaded into the check form by id
  and shown on its page; the keyboard walk (tab order, focus rings, Enter);
- a 1 MiB text renders its highlights within a bound;
- no errors in the browser's console (CSP violations, script errors);
- screenshots at 1280 (1400) and 390 px under the build directory
  (tests/artifacts/console-*.png).

Skipped (exit 77) when chromium, chromedriver or selenium is missing or
chromium cannot start here, unless ND_BROWSER_REQUIRED=1 (tests/run-all.sh
sets it): then that is a failure.
"""

import json
import os
import random
import shutil
import sys
import time
from urllib.parse import quote

try:
    from selenium import webdriver
except ImportError:
    # Debian's python3-selenium is for Debian's python3; another python3
    # found first on PATH may not have it.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3") and not os.environ.get("ND_CONSOLE_REEXEC"):
        os.environ["ND_CONSOLE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    webdriver = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SOURCE_ROOT, Runner, Server, check, expect_error,  # noqa: E402
                     load_texts, neardupd_path)

T = Runner("test_console")
TEXTS = load_texts()
TOKEN = "console-operator-token-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}
REQUIRED = os.environ.get("ND_BROWSER_REQUIRED") == "1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30  # seconds: every wait for the page is bounded
ARTIFACTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(neardupd_path()))),
                         "tests", "artifacts")
CONSOLE_DIR = os.path.join(SOURCE_ROOT, "server", "console")
HOSTILE_ID = '<script>window.__xss=1;alert(1)</script>'
HOSTILE_META = {
    "title": '<img src=x onerror="window.__xss=1;alert(1)">',
    "author": '"onerror=window.__xss=1;alert(1) x="',
    "url": "javascript:window.__xss=1;alert(1)",
    "note": "\u202eevil.exe\u202c <b>bold?</b>",
}


def skip(reason):
    if REQUIRED:
        print("FAIL: %s; ND_BROWSER_REQUIRED=1: this test must run" % reason)
        sys.exit(1)
    print("SKIP: %s" % reason)
    sys.exit(77)


# -- texts: Chinese with emoji (4 UTF-8 bytes, 2 UTF-16 units, 1 code point) --

def with_emoji(text, every=37):
    out = []
    for i, ch in enumerate(text):
        out.append(ch)
        if i % every == every - 1 and ch not in "\n":
            out.append("😀" if i % 2 else "😺")
    return "".join(out)


ORIGINAL = with_emoji(TEXTS["zh1"])
_paras = [p for p in ORIGINAL.split("\n\n") if p.strip()]
# A partial copy in two passages (measured: containment 0.69, resemblance
# 0.43): an emoji header, two runs of the original's paragraphs, each
# followed by a paragraph of another text.
COPY = ("😺😺 转载 😀\n\n" + "\n\n".join(_paras[1:4]) + "\n\n" + TEXTS["zh2"][:200] + "\n\n" +
        "\n\n".join(_paras[8:11]) + "\n\n" + TEXTS["zh3"][:120])


# -- the browser --

class Browser:
    """One headless chromium for the run; stopped by close()."""

    def __init__(self, base):
        from selenium.webdriver.chrome.service import Service
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-extensions", "--no-first-run", "--window-size=1280,900",
                  "--lang=en-US"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.service = Service(CHROMEDRIVER, log_output=os.devnull) \
            if "log_output" in Service.__init__.__code__.co_varnames else Service(CHROMEDRIVER)
        self.d = webdriver.Chrome(service=self.service, options=opts)
        self.d.set_page_load_timeout(WAIT)
        self.d.set_script_timeout(WAIT)
        self.base = base
        self.logs = []

    def close(self):
        try:
            self.d.quit()
        finally:
            try:
                self.service.stop()
            except Exception:
                pass

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def by_id(self, id_):
        from selenium.webdriver.common.by import By
        return self.d.find_element(By.ID, id_)

    def wait(self, cond, what, timeout=WAIT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = cond()
                if last:
                    return last
            except Exception as e:  # noqa: BLE001 - the page still changing
                last = e
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))

    def text(self, id_):
        return self.js("return document.getElementById(arguments[0]).textContent", id_)

    def go(self, frag):
        self.js("location.hash = arguments[0]", frag)

    def collect_logs(self):
        self.logs += self.d.get_log("browser")
        return self.logs

    def screenshot(self, name, width):
        """The whole page at this width (the window as tall as the page, at
        most 4000 px), saved as tests/artifacts/console-NAME-WIDTH.png."""
        os.makedirs(ARTIFACTS, exist_ok=True)
        self.js("if (document.activeElement) document.activeElement.blur(); window.scrollTo(0, 0)")
        self.d.set_window_size(width, 900)
        time.sleep(0.2)
        h = self.js("return document.documentElement.scrollHeight")
        self.d.set_window_size(width, min(max(h, 600) + 90, 4000))
        time.sleep(0.3)
        path = os.path.join(ARTIFACTS, "console-%s-%d.png" % (name, width))
        self.d.save_screenshot(path)
        self.d.set_window_size(1280, 900)
        check(os.path.getsize(path) > 5000, "screenshot %s is empty", path)
        return path

    def no_injection(self):
        """Nothing hostile ran or was inserted: no alert, window.__xss unset,
        one script element (ours), no img but the logo, no on* attribute."""
        from selenium.common.exceptions import NoAlertPresentException
        try:
            alert = self.d.switch_to.alert
            text = alert.text
            alert.dismiss()
            raise AssertionError("an alert opened: %r" % text)
        except NoAlertPresentException:
            pass
        state = self.js("""
            const attrs = [];
            for (const e of document.querySelectorAll('*'))
              for (const a of e.attributes)
                if (a.name.toLowerCase().startsWith('on')) attrs.push(e.tagName + ' ' + a.name);
            return {xss: window.__xss === undefined ? null : window.__xss,
                    scripts: Array.from(document.scripts).map((s) => s.getAttribute('src')),
                    imgs: Array.from(document.images).map((i) => i.getAttribute('src')),
                    bold: document.querySelectorAll('main b').length,
                    attrs: attrs};""")
        check(state["xss"] is None, "a hostile script ran: %r", state)
        check(state["scripts"] == ["console.js"], "scripts: %r", state)
        check(state["imgs"] == ["favicon.svg"], "images: %r", state)
        check(state["bold"] == 0 and not state["attrs"], "injected markup: %r", state)


def marks(b, box):
    """The marks of box: for each text node inside a <mark>, its passages,
    its code-point offsets counted from the DOM (not from the page's data
    attributes), its text; and the box's whole text."""
    return b.js("""
        const box = document.getElementById(arguments[0]);
        const out = [];
        let cp = 0;
        const w = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
        for (let n = w.nextNode(); n; n = w.nextNode()) {
          const len = Array.from(n.data).length;
          const m = n.parentElement.closest('mark');
          if (m && box.contains(m))
            out.push({p: m.dataset.p.split(' ').map(Number), start: cp, end: cp + len,
                      text: n.data, ds: Number(m.dataset.start), de: Number(m.dataset.end)});
          cp += len;
        }
        return {marks: out, text: box.textContent};""", box)


def assert_spans(got, text, spans, side):
    """The marks of one side equal spans ([{start, end}] code points)."""
    check(got["text"] == text, "%s: the pane's text is not the text (%d vs %d chars)", side,
          len(got["text"]), len(text))
    for i, s in enumerate(spans):
        parts = [m for m in got["marks"] if i in m["p"]]
        check(parts, "%s: passage %d %r not highlighted", side, i, s)
        start, end = parts[0]["start"], parts[-1]["end"]
        for a, b in zip(parts, parts[1:]):
            check(a["end"] == b["start"], "%s: passage %d highlighted with a gap", side, i)
        check((start, end) == (s["start"], s["end"]), "%s: passage %d at %d..%d, answer %r",
              side, i, start, end, s)
        joined = "".join(m["text"] for m in parts)
        check(joined == text[s["start"]:s["end"]], "%s: passage %d text %r != %r", side, i,
              joined[:40], text[s["start"]:s["end"]][:40])
        check(all(m["ds"] == m["start"] and m["de"] == m["end"] for m in parts),
              "%s: data-start/end disagree with the DOM: %r", side, parts[:3])
    covered = set()
    for m in got["marks"]:
        check(m["p"] and all(0 <= p < len(spans) for p in m["p"]), "%s: stray mark %r", side, m)
        covered.add(m["start"])
    return len(got["marks"])


def enter_token(b, token=TOKEN):
    field = b.by_id("token")
    field.clear()
    field.send_keys(token + "\n")
    b.wait(lambda: "token in use" in b.text("token-state"), "the token state")
    kept = b.js("return [sessionStorage.getItem('neardup.console.token'), localStorage.length,"
                " document.cookie, document.getElementById('token').value]")
    check(kept == [token, 0, "", ""], "the token is kept in sessionStorage only: %r", kept)


def ensure_token(b):
    """The page open with the token (a test run alone: ND_TEST_ONLY)."""
    if not b.js("return sessionStorage.getItem('neardup.console.token')"):
        b.d.get(b.base + "/console/")
        enter_token(b)


def check_through_page(b, text, id_=None, keyboard=True):
    """Pastes text into the check form and submits it; returns the seconds
    until the verdict shows."""
    ensure_token(b)
    b.go("#/check")
    b.wait(lambda: b.by_id("page-check").is_displayed(), "the check page")
    area = b.by_id("check-text")
    b.js("arguments[0].value = arguments[1];"
         "arguments[0].dispatchEvent(new Event('input'));", area, text)
    idf = b.by_id("check-id")
    idf.clear()
    if id_:
        idf.send_keys(id_)
    b.js("document.getElementById('check-json').textContent = ''")
    t0 = time.monotonic()
    if keyboard:
        from selenium.webdriver.common.keys import Keys
        area.send_keys(Keys.CONTROL, Keys.ENTER)  # Ctrl+Enter in the text checks it
    else:
        b.by_id("check-submit").click()
    b.wait(lambda: b.text("check-json"), "the check's answer")
    b.wait(lambda: b.js("return document.getElementById('check-result').dataset.renderMs"
                        " !== undefined && document.getElementById('src-info').textContent"
                        " !== 'loading…'"), "the texts side by side")
    return time.monotonic() - t0


def api_check(srv, text, **extra):
    body = {"text": text}
    body.update(extra)
    status, ans = srv.json("POST", "/check-original", body, headers=AUTH)
    check(status == 200, "check: %s %r", status, ans)
    return ans


def shown_match(ans):
    """The match the page shows first (console.js firstShown())."""
    ms = ans["matches"]
    for i, m in enumerate(ms):
        if isinstance(m.get("passages"), list) and m["passages"]:
            return i
    for i, m in enumerate(ms):
        if m["kind"] == "partial_copy":
            return i
    return 0


def register_original(srv):
    """Registers ORIGINAL as zh-original (again: the same answer)."""
    status, reg = srv.json("POST", "/check-original",
                           {"id": "zh-original", "register": True, "text": ORIGINAL,
                            "meta": {"title": "非官方来源 😀", "author": "李明"}}, headers=AUTH)
    check(status == 200 and reg["registered"], "register: %s %r", status, reg)


def expected_pairs(srv, text, m):
    """The passage pairs the page must show for match m: its own, else
    those of POST /compare of text with its document (None when the server
    has no /compare); and where they came from."""
    if isinstance(m.get("passages"), list):
        return m["passages"], "the match's passages"
    status, pair = srv.json("POST", "/compare", {"text_a": text, "id_b": m["id"]}, headers=AUTH)
    if status == 404 and pair["error"]["code"] == "not_found" and "endpoint" in \
            pair["error"]["message"]:
        return None, "no /compare"
    if status == 409 and pair["error"]["code"] == "text_not_kept":
        return None, "no text kept"
    check(status == 200, "compare: %s %r", status, pair)
    return pair["passages"], "POST /compare"


def source_text(srv, doc_id):
    status, d = srv.json("GET", "/documents/%s?text=true" % quote(doc_id, safe=""), headers=AUTH)
    return d.get("text") if status == 200 and isinstance(d, dict) else None


def doc_hash(doc_id):
    return "#/document/" + quote(doc_id, safe="")


def fig(x):
    return str(x) if isinstance(x, int) else "%.4f" % x


# The words the page gives each kind of match (console.js KINDS).
KIND_WORDS = {
    "identical": "identical: the same text",
    "near_duplicate": "near duplicate: nearly the same text",
    "partial_copy": "partial copy: a part of it copied",
    "rewrite": "rewrite: reworded all along",
    "compiled": "compiled: part of a compilation",
    "quotation": "quotation: a large quotation",
    "quoted": "quoted: listed, not evidence",
}


def percent(x):
    """A share as the page shows it: round(100 * x) %, under 1 % for a part
    that rounds to none, over 99 % for less than all that rounds to all."""
    if x is None:
        return "\u2014"
    r = round(100 * x)
    if r == 0 and x > 0:
        return "under 1\u00a0%"
    if r == 100 and x < 1:
        return "over 99\u00a0%"
    return "%d\u00a0%%" % r


# -- tests --

@T.test
def test_headers(srv, b):
    status, h, body = srv.request("GET", "/console/")
    check(status == 200, "GET /console/: %s", status)
    csp = h.get("content-security-policy", "")
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'",
                      "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'",
                      "object-src 'none'"):
        check(directive in csp, "CSP lacks %r: %r", directive, csp)
    check("unsafe" not in csp, "CSP allows something unsafe: %r", csp)
    check(h.get("x-content-type-options") == "nosniff", "%r", h)
    check(h.get("referrer-policy") == "no-referrer", "%r", h)
    check(h.get("x-frame-options") == "DENY", "%r", h)
    check(h.get("content-type") == "text/html; charset=utf-8", "%r", h)
    etag = h.get("etag", "")
    check(len(etag) == 18 and etag[0] == etag[-1] == '"', "ETag %r", etag)
    with open(os.path.join(CONSOLE_DIR, "index.html"), "rb") as f:
        check(body == f.read(), "the page served is not server/console/index.html")
    check(b"<script>" not in body and b" style=" not in body and b"<style" not in body,
          "inline script or style in the page")
    status, h2, body2 = srv.request("GET", "/console/", headers={"If-None-Match": etag})
    check(status == 304 and not body2 and h2.get("etag") == etag, "304: %s %r", status, h2)
    status, h3, body3 = srv.request("HEAD", "/console/")
    check(status == 200 and not body3 and h3.get("content-length") == str(len(body)),
          "HEAD: %s %r", status, h3)
    for name, ctype in (("console.js", "text/javascript; charset=utf-8"),
                        ("console.css", "text/css; charset=utf-8"),
                        ("favicon.svg", "image/svg+xml"), ("index.html",
                                                           "text/html; charset=utf-8")):
        status, h, body = srv.request("GET", "/console/" + name)
        check(status == 200 and h.get("content-type") == ctype, "%s: %s %r", name, status, h)
        check("script-src 'self'" in h.get("content-security-policy", ""), "%s: no CSP", name)
        with open(os.path.join(CONSOLE_DIR, name), "rb") as f:
            check(body == f.read(), "%s served differs from server/console/%s", name, name)
    status, body = srv.json("GET", "/console/nope.js")
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("GET", "/console/%2e%2e/etc/passwd")
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("POST", "/console/", {})
    expect_error(status, body, 405, "method_not_allowed")
    status, h, _ = srv.request("GET", "/console")
    check(status == 301 and h.get("location") == "/console/", "/console: %s %r", status, h)
    m = srv.metrics()
    check(m.get('neardup_http_requests_total{route="/console/",code="200"}', 0) >= 6,
          "console requests not counted under their route: %r",
          {k: v for k, v in m.items() if "console" in k})


@T.test
def test_console_off(srv, b):
    for args, env in ((["--console=false"], None), ([], {"NEARDUP_CONSOLE": "false"})):
        with Server(args, in_memory=True, env=env) as off:
            for path in ("/console/", "/console/console.js", "/console"):
                status, body = off.json("GET", path)
                expect_error(status, body, 404, "not_found")
            status, _ = off.json("GET", "/healthz")
            check(status == 200, "healthz with the console off: %s", status)
    with Server(["--console=true"], in_memory=True, env={"NEARDUP_CONSOLE": "false"}) as on:
        status, _, _ = on.request("GET", "/console/")
        check(status == 200, "--console=true over NEARDUP_CONSOLE=false: %s", status)


@T.test
def test_check_passages(srv, b):
    register_original(srv)
    b.d.get(b.base + "/console/")
    enter_token(b)
    secs = check_through_page(b, COPY, id_="zh-copy-1")
    ans = api_check(srv, COPY, id="zh-copy-1")  # the same id and text again: the same answer
    page = json.loads(b.text("check-json"))
    for key in ("verdict", "action", "passages", "matches", "integrity", "chars"):
        check(page[key] == ans[key], "%s: page %r, API %r", key, page.get(key), ans.get(key))
    check(ans["verdict"] == "partial_copy" and ans["passages"], "not a partial copy: %r", ans)
    verdict = b.text("verdict")
    check("partial_copy" in verdict and ans["action"] in verdict, "verdict shown: %r", verdict)
    rows = b.js("return Array.from(document.querySelectorAll('#matches tbody tr'))"
                ".map((tr) => Array.from(tr.cells).map((c) => c.textContent))")
    check(len(rows) == len(ans["matches"]), "rows %r", rows)
    for row, m in zip(rows, ans["matches"]):
        check(row[0].startswith(m["id"]) and row[1] == KIND_WORDS[m["kind"]], "row %r vs %r",
              row, m)
        check(row[2] == percent(m.get("share")), "share %r vs %r", row, m)
        check(row[3:6] == [fig(m["resemblance"]), fig(m["containment"]), fig(m["distance"])],
              "figures %r vs %r", row, m)
    i = shown_match(ans)
    m = ans["matches"][i]
    check(b.js("return document.getElementById('check-result').dataset.shown") == m["id"],
          "the page shows another match than %s", m["id"])
    pairs, how = expected_pairs(srv, COPY, m)
    if pairs is not None:
        check(pairs, "no passage pairs (%s)", how)
    if how == "POST /compare":
        shown = json.loads(b.text("pair-json"))
        check(shown["passages"] == pairs and shown["kind"] == "partial_copy",
              "the pair the page shows: %r, the API's passages %r", shown, pairs)
    sub_spans = pairs if pairs is not None else ans["passages"]
    n = assert_spans(marks(b, "sub-text"), COPY, sub_spans, "submitted")
    check(n >= len(sub_spans) > 0, "no marks")
    src = source_text(srv, m["id"])
    check(src is not None and pairs is not None, "no source side: text kept %s, pairs %s",
          src is not None, how)
    check(src == ORIGINAL, "the source text is not the registered text")
    src_spans = [{"start": p["source_start"], "end": p["source_end"]} for p in pairs]
    assert_spans(marks(b, "src-text"), src, src_spans, "source")
    # Clicking a passage scrolls to its partner and flashes it.
    for k in (len(pairs) - 1, 0):
        b.js("document.getElementById('src-text').scrollTop = 0;"
             "document.getElementById(arguments[0]).click()", "sub-p%d" % k)
        b.wait(lambda: b.js("""
            const t = document.getElementById(arguments[0]);
            const box = document.getElementById('src-text').getBoundingClientRect();
            const r = t.getBoundingClientRect();
            return t.classList.contains('flash') && r.bottom > box.top && r.top < box.bottom
                && document.activeElement === t;""", "src-p%d" % k),
            "the partner of passage %d flashed in view" % k)
    print("     both sides checked: %d pairs (%s)" % (len(pairs), how))
    print("     verdict shown %.2f s after submit" % secs)
    b.no_injection()
    time.sleep(1.3)  # the partner's flash (1.2 s) over: the screenshots show the page at rest
    for w in (1280, 390):
        b.screenshot("check", w)
    # The view README.md shows (docs/console.png): 1280 px wide from the matches.
    b.js("if (document.activeElement) document.activeElement.blur();"
         "document.getElementById('matches').closest('.scroll').previousElementSibling"
         ".scrollIntoView({block: 'start'})")
    time.sleep(0.2)
    b.d.save_screenshot(os.path.join(ARTIFACTS, "console-readme-1280.png"))
    assert_no_overlap(b, "the check at 1280 px")


@T.test
def test_keyboard(srv, b):
    """Tab walks the check page in reading order, each stop with a visible
    focus ring; Enter in the id field submits the check."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    ensure_token(b)
    b.d.get(b.base + "/console/#/check")
    b.wait(lambda: b.by_id("page-check").is_displayed(), "the check page")
    b.js("document.querySelector('a.skip').focus()")  # the first stop of the page
    stops = []
    for _ in range(14):
        ActionChains(b.d).send_keys(Keys.TAB).perform()
        stops.append(b.js("""
            const e = document.activeElement;
            const st = getComputedStyle(e);
            return [e.id || e.tagName, st.outlineStyle !== 'none' && parseFloat(st.outlineWidth) > 0];"""))
    order = [s[0] for s in stops]
    want = ["nav-check", "nav-detections", "open-doc-id", "token", "token-save", "token-forget",
            "check-pick", "check-pick-load", "check-text", "check-id", "check-account",
            "check-register", "check-submit"]
    pos = [order.index(w) if w in order else -1 for w in want]
    check(-1 not in pos and pos == sorted(pos), "tab order %r", order)
    check(all(ring for _, ring in stops), "a stop without a focus ring: %r", stops)
    b.js("arguments[0].value = arguments[1]", b.by_id("check-text"), COPY)
    b.js("document.getElementById('check-json').textContent = ''")
    field = b.by_id("check-id")
    field.clear()
    field.send_keys(Keys.ENTER)
    b.wait(lambda: b.text("check-json"), "the answer after Enter")
    b.js("document.getElementById('check-text').value = ''")


@T.test
def test_registered_texts(srv, b):
    """A registered document's text: loaded into the check form by its id,
    and shown on its page, as it was submitted (emoji and all)."""
    register_original(srv)
    ensure_token(b)
    b.go("#/check")
    pick = b.by_id("check-pick")
    pick.clear()
    pick.send_keys("zh-original\n")  # Enter loads it
    if source_text(srv, "zh-original") is None:
        b.wait(lambda: "does not give the text" in b.text("notice"), "the no-text notice")
        print("     this server keeps no texts: the page says so")
        return
    b.wait(lambda: b.by_id("check-text").get_attribute("value") == ORIGINAL,
           "the original's text in the form")
    b.go(doc_hash("zh-original"))
    b.wait(lambda: "zh-original" in b.text("doc-record"), "its page")
    b.by_id("doc-text-show").click()
    b.wait(lambda: b.text("doc-text") == ORIGINAL, "its text on its page (%r)"
           % b.text("doc-text-state"))
    check(str(len(ORIGINAL)) in b.text("doc-text-state"), "count %r", b.text("doc-text-state"))
    b.js("document.getElementById('check-text').value = ''")


@T.test
def test_english_duplicate(srv, b):
    en = TEXTS["en1"]
    status, reg = srv.json("POST", "/check-original", {"id": "en-original", "register": True,
                                                       "text": en}, headers=AUTH)
    check(status == 200 and reg["registered"], "register: %r", reg)
    repost = en.replace(". ", ".  ").replace("the ", "The ", 3)
    check_through_page(b, repost, keyboard=False)
    ans = api_check(srv, repost)
    page = json.loads(b.text("check-json"))
    check(page["verdict"] == ans["verdict"] == "duplicate", "verdict %r / %r", page["verdict"],
          ans["verdict"])
    check(b.js("return document.querySelector('#verdict .verdict-duplicate') !== null"),
          "verdict not shown as duplicate")
    m = ans["matches"][shown_match(ans)]
    pairs, how = expected_pairs(srv, repost, m)
    if pairs is not None:
        check(pairs, "a near duplicate without passages (%s)", how)
        assert_spans(marks(b, "sub-text"), repost, pairs, "submitted (duplicate)")
        assert_spans(marks(b, "src-text"), en, [{"start": p["source_start"],
                                                  "end": p["source_end"]} for p in pairs],
                     "source (duplicate)")


def shares_shown(b):
    """The copied share's line and each match row's kind (data-kind, its
    words) and share, as the page shows them."""
    return b.js("""
        return {copied: document.getElementById('copied-share').textContent,
                bar: Number(document.querySelector('#copied-share meter').value),
                rows: Array.from(document.querySelectorAll('#matches tbody tr')).map((tr) => ({
                  id: tr.cells[0].querySelector('bdi').textContent,
                  kind: tr.cells[1].dataset.kind, words: tr.cells[1].textContent,
                  share: tr.cells[2].textContent,
                  bar: tr.cells[2].querySelector('meter') ?
                    Number(tr.cells[2].querySelector('meter').value) : null}))};""")


def assert_shares(b, ans, where):
    """The page shows the answer's copied share ("N % of this text is found
    in K sources", its bar) and each match's kind in words and share."""
    got = shares_shown(b)
    holders = [m for m in ans["matches"] if m.get("share", 0) > 0 and not m.get("same_account")
               and m.get("status", "active") != "revoked"]
    want = "%s of this text is found in %d source%s" % (
        percent(ans["copied_share"]), len(holders), "" if len(holders) == 1 else "s")
    if ans["share_estimated"]:
        want += " (estimated)"
    check(got["copied"] == want, "%s: copied share shown %r, want %r (copied_share %r)", where,
          got["copied"], want, ans["copied_share"])
    check(abs(got["bar"] - ans["copied_share"]) < 1e-9, "%s: bar %r", where, got["bar"])
    check(len(got["rows"]) == len(ans["matches"]), "%s: rows %r", where, got["rows"])
    for row, m in zip(got["rows"], ans["matches"]):
        check(row["id"] == m["id"] and row["kind"] == m["kind"] and
              row["words"] == KIND_WORDS[m["kind"]], "%s: kind %r vs %r", where, row, m)
        check(row["share"] == percent(m["share"]) and
              abs(row["bar"] - m["share"]) < 1e-9, "%s: share %r vs %r", where, row, m["share"])
    return got


def assert_no_overlap(b, where):
    """At the window's width: neither the page nor the matches scroll
    sideways, and in the copied share's line and each share cell the bar
    and its words neither overlap nor leave their box."""
    bad = b.js("""
        const out = [];
        const r = (e) => e.getBoundingClientRect();
        const doc = document.documentElement;
        if (doc.scrollWidth > doc.clientWidth) out.push('page wider than the window: ' + doc.scrollWidth);
        const table = document.getElementById('matches').closest('.scroll');
        if (table.scrollWidth > table.clientWidth + 1) out.push('the matches scroll sideways: ' + table.scrollWidth);
        for (const line of document.querySelectorAll('#check-result .share-line')) {
          const box = r(line.closest('td, dd'));
          const [bar, words] = [r(line.children[0]), r(line.children[1])];
          const apart = bar.right <= words.left + 0.5 || words.top >= bar.bottom - 0.5;
          const inside = (q) => q.left >= box.left - 0.5 && q.right <= box.right + 0.5 &&
            q.top >= box.top - 0.5 && q.bottom <= box.bottom + 0.5;
          if (!apart || !inside(bar) || !inside(words))
            out.push([line.textContent, JSON.stringify([bar, words, box])]);
        }
        return out;""")
    check(not bad, "%s: overlap: %r", where, bad)


@T.test
def test_copied_share(srv, b):
    """The copied share as a percentage with a bar, each source's share and
    kind in words, as /check-original answers them: a splice of two
    registered articles (paragraphs of each: a compilation, both sources
    compiled) and an original quoting a registered article (its source
    quoted, not evidence); at 1400 and 390 px without overlap. On a server
    of its own (the other tests' registrations hold these texts too)."""
    parts = (TEXTS["zh2"].split("\n\n")[:6], TEXTS["zh3"].split("\n\n")[-9:])
    splice = "\n\n".join(parts[0] + parts[1])
    host = TEXTS["en5"].split("\n\n")
    run = "\n\n".join(TEXTS["en4"].split("\n\n")[1:4])
    quoting = "\n\n".join(host[:7] + [run] + host[7:])
    with Server(env={"NEARDUP_TOKEN": TOKEN}) as own:
        for doc_id, name in (("zh-source-a", "zh2"), ("zh-source-b", "zh3"),
                             ("en-quoted-source", "en4")):
            status, reg = own.json("POST", "/check-original", {"id": doc_id, "register": True,
                                                              "text": TEXTS[name]}, headers=AUTH)
            check(status == 200 and reg["registered"], "register %s: %s %r", doc_id, status, reg)
        b.d.get("http://127.0.0.1:%d/console/" % own.port)
        enter_token(b)
        for name, text, verdict, kinds in (
                ("compilation", splice, "compilation", {"zh-source-a": "compiled",
                                                        "zh-source-b": "compiled"}),
                ("quoted", quoting, "original", {"en-quoted-source": "quoted"})):
            check_through_page(b, text, keyboard=False)
            ans = api_check(own, text)
            page = json.loads(b.text("check-json"))
            for key in ("verdict", "copied_share", "share_estimated", "matches"):
                check(page[key] == ans[key], "%s: %s: page %r, API %r", name, key, page.get(key),
                      ans.get(key))
            check(ans["verdict"] == verdict and
                  {m["id"]: m["kind"] for m in ans["matches"]} == kinds and
                  all(m["share"] > 0 for m in ans["matches"]),
                  "%s: %r", name, {k: ans.get(k) for k in ("verdict", "copied_share", "matches")})
            got = assert_shares(b, ans, name)
            print("     %s: %r; %s" % (name, got["copied"], ", ".join(
                "%s %s %s" % (r["id"], r["kind"], r["share"]) for r in got["rows"])))
            for w in (1400, 390):
                b.d.set_window_size(w, 900)
                time.sleep(0.2)
                assert_no_overlap(b, "%s at %d px" % (name, w))
                b.screenshot(name, w)
            b.no_injection()
    b.d.get(b.base + "/console/")
    ensure_token(b)


@T.test
def test_register_through_page(srv, b):
    """A registration made by the page carries the token typed into it."""
    text = with_emoji(TEXTS["zh3"])
    b.go("#/check")
    b.js("arguments[0].value = arguments[1]", b.by_id("check-text"), text)
    b.by_id("check-id").clear()
    b.by_id("check-id").send_keys("zh-page-registered")
    b.by_id("check-register").click()
    b.js("document.getElementById('check-json').textContent = ''")
    b.by_id("check-submit").click()
    b.wait(lambda: b.text("check-json"), "the answer")
    page = json.loads(b.text("check-json"))
    b.by_id("check-register").click()  # off again
    check(page["registered"] is True and page["verdict"] == "original", "%r", page)
    status, audit = srv.json("GET", "/audit?document=zh-page-registered", headers=AUTH)
    check(status == 200 and audit["entries"][0]["action"] == "register" and
          audit["entries"][0]["client"] == "default", "audit %s %r", status, audit)
    # Without the token the same registration through the page is refused.
    b.by_id("token-forget").click()
    b.by_id("check-id").clear()
    b.by_id("check-id").send_keys("zh-page-refused")
    b.by_id("check-register").click()
    b.js("arguments[0].value = arguments[1]", b.by_id("check-text"), with_emoji(TEXTS["zh4"]))
    b.by_id("check-submit").click()
    b.wait(lambda: "401" in b.text("notice"), "the 401 notice")
    b.by_id("check-register").click()
    b.by_id("check-id").clear()
    status, _ = srv.json("GET", "/documents/zh-page-refused")
    check(status == 404, "registered without a token: %s", status)
    enter_token(b)


@T.test
def test_revoke_restore(srv, b):
    # From the check page's match link to the original's page.
    check_through_page(b, COPY, id_="zh-copy-2")
    b.js("document.querySelector('#matches tbody a[href=\"#/document/zh-original\"]').click()")
    b.wait(lambda: b.by_id("page-document").is_displayed() and
           "zh-original" in b.text("doc-record"), "the original's page")
    b.wait(lambda: "shown" in b.text("copies-state"), "its copies")
    copies = b.js("return Array.from(document.querySelectorAll('#copies tbody tr'))"
                  ".map((tr) => tr.cells[0].textContent)")
    check({"zh-copy-1", "zh-copy-2"} <= set(copies), "copies shown: %r", copies)
    check(b.text("doc-status") == "active", "status %r", b.text("doc-status"))
    reason = "appeal 2026-7: licensed 授权 😀 <b>x</b>"
    field = b.by_id("claim-reason")
    field.send_keys(reason[:20])
    b.js("arguments[0].value += arguments[1]", field, reason[20:])  # the emoji: not BMP
    field.send_keys("\n")  # Enter submits the form's one visible button: revoke
    b.wait(lambda: b.text("doc-status") == "revoked", "status revoked")
    b.wait(lambda: b.js("return document.querySelector('#audit tbody tr[data-action=revoke]')"
                        " !== null"), "the revoke entry")
    check(b.js("return document.getElementById('claim-revoke').hidden &&"
               " !document.getElementById('claim-restore').hidden"), "buttons after revoke")
    for w in (1280, 390):
        b.screenshot("document", w)
    b.by_id("claim-reason").send_keys("appeal withdrawn")
    b.by_id("claim-restore").click()
    b.wait(lambda: b.text("doc-status") == "active", "status active")
    b.wait(lambda: b.js("return document.querySelector('#audit tbody tr[data-action=restore]')"
                        " !== null"), "the restore entry")
    rows = b.js("return Array.from(document.querySelectorAll('#audit tbody tr'))"
                ".map((tr) => [tr.cells[0].querySelector('time').getAttribute('datetime')]"
                ".concat(Array.from(tr.cells).slice(1).map((c) => c.textContent)))")
    status, audit = srv.json("GET", "/audit?document=zh-original", headers=AUTH)
    check(status == 200, "audit %s", status)
    api_rows = [[e["at"], e["client"] or "—", e["action"]] for e in audit["entries"]]
    check([r[:3] for r in rows] == api_rows, "audit rows %r vs API %r", rows, api_rows)
    check([e["action"] for e in audit["entries"][:2]] == ["restore", "revoke"], "%r", audit)
    check(audit["entries"][1]["detail"]["reason"] == reason, "%r", audit["entries"][1])
    check(reason in rows[1][3] and "appeal withdrawn" in rows[0][3], "reasons shown: %r", rows)
    b.no_injection()


@T.test
def test_copies_paged(srv, b):
    """An original's copies, 20 a page: "More copies" brings the next page,
    the rows as GET /documents/{id}/copies lists them, newest first."""
    register_original(srv)
    for k in range(23):
        api_check(srv, COPY + "\n\n第%d页。" % k, id="zh-copy-page-%d" % k)
    status, page = srv.json("GET", "/documents/zh-original/copies?limit=1000", headers=AUTH)
    check(status == 200 and len(page["copies"]) >= 23, "copies %s %r", status, page)
    want = [c["id"] for c in page["copies"]]
    ensure_token(b)
    b.go("#/check")
    b.go(doc_hash("zh-original"))
    rows = "return Array.from(document.querySelectorAll('#copies tbody tr'))" \
           ".map((tr) => tr.cells[0].textContent)"
    b.wait(lambda: len(b.js(rows)) == 20, "the first page of copies")
    check(b.js(rows) == want[:20], "first page %r, API %r", b.js(rows)[:3], want[:3])
    b.by_id("copies-more").click()
    b.wait(lambda: len(b.js(rows)) == min(40, len(want)), "the second page of copies")
    check(b.js(rows) == want[:40], "two pages %r", b.js(rows))
    check(b.by_id("copies-more").is_displayed() == (len(want) > 40), "the More button")


@T.test
def test_hostile(srv, b):
    text = ("<script>window.__xss=1;alert(1)</script> " + '"onerror=alert(1) x=" ' +
            '<img src=x onerror="window.__xss=1"> \u202eRTL override\u202c ') + TEXTS["en2"]
    status, reg = srv.json("POST", "/check-original",
                           {"id": HOSTILE_ID, "register": True, "text": text,
                            "account": "\u202eacct<i>x</i>", "meta": HOSTILE_META},
                           headers=AUTH)
    check(status == 200 and reg["registered"], "register: %s %r", status, reg)
    check_through_page(b, text[:900] + "\n\nand a closing line of the copy.", id_=HOSTILE_ID + "-copy")
    b.no_injection()
    pane = b.text("sub-text")
    check(pane.startswith("<script>window.__xss=1;alert(1)</script>"), "text not literal: %r",
          pane[:80])
    table = b.text("matches")
    for v in (HOSTILE_ID, HOSTILE_META["title"], HOSTILE_META["author"], HOSTILE_META["note"]):
        check(v in table, "%r not shown literally in the matches: %r", v, table[:400])
    check(b.js("return document.querySelector('#matches a[href^=\"javascript\"]') === null"),
          "a javascript: URL became a link")
    isolated = b.js("return Array.from(document.querySelectorAll('#matches bdi'))"
                    ".map((e) => e.textContent)")
    check(HOSTILE_META["note"] in isolated and HOSTILE_ID in isolated,
          "hostile values not isolated in <bdi>: %r", isolated)
    # Its page, opened by typing the id into the header's form.
    field = b.by_id("open-doc-id")
    field.clear()
    field.send_keys(HOSTILE_ID + "\n")
    b.wait(lambda: b.text("doc-name") == HOSTILE_ID and HOSTILE_ID in b.text("doc-record"),
           "the hostile document's page")
    b.wait(lambda: "shown" in b.text("audit-state"), "its audit entries")
    record = b.text("doc-record")
    for v in HOSTILE_META.values():
        check(v in record, "%r not shown literally: %r", v, record)
    check("\u202eacct<i>x</i>" in record, "account not literal: %r", record)
    b.no_injection()
    for w in (1280, 390):
        b.screenshot("hostile", w)
    # A hash that is not a valid escape: a notice, nothing else.
    b.go("#/document/%E0%A4%A")
    b.wait(lambda: "does not name a document" in b.text("notice"), "the bad link notice")
    b.no_injection()


@T.test
def test_detections(srv, b):
    status, feed = srv.json("GET", "/events?order=desc&type=copy.detected&limit=100",
                            headers=AUTH)
    ensure_token(b)
    b.go("#/detections")
    check(status == 200, "GET /events: %s %r", status, feed)
    # More detections than a page (20): copies of the original, each its id.
    register_original(srv)
    for k in range(24):
        api_check(srv, COPY + "\n\n第%d次转载。" % k, id="zh-copy-feed-%d" % k)
    status, feed = srv.json("GET", "/events?order=desc&type=copy.detected&limit=1000",
                            headers=AUTH)
    check(status == 200 and len(feed["events"]) >= 24, "feed %s %r", status, feed)
    b.by_id("det-newest").click()
    b.wait(lambda: b.js("return document.querySelectorAll('#detections tbody tr').length") == 20,
           "the first page")
    b.by_id("det-older").click()
    want = len(feed["events"])
    b.wait(lambda: b.js("return document.querySelectorAll('#detections tbody tr').length")
           == min(40, want), "the second page")
    seqs = b.js("return Array.from(document.querySelectorAll('#detections tbody tr'))"
                ".map((tr) => Number(tr.dataset.seq))")
    check(seqs == [e["seq"] for e in feed["events"]][:len(seqs)], "seqs %r", seqs[:5])
    check(seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs), "order %r", seqs)
    first = b.js("return Array.from(document.querySelector('#detections tbody tr').cells)"
                 ".map((c) => c.textContent)")
    ev = feed["events"][0]
    check(b.js("return document.querySelector('#detections tbody time').getAttribute('datetime')")
          == ev["at"], "the first row's time is not the newest event's")
    check(first[1].startswith(ev["data"]["copy"]["id"]) and
          first[2].startswith(ev["data"]["original"]["id"]) and first[3] == ev["data"]["kind"],
          "first row %r vs %r", first, ev)
    for w in (1280, 390):
        b.screenshot("detections", w)


@T.test
def test_large_text(srv, b):
    """1 MiB: a long original of lines drawn at random (seeded) from the
    shipped texts' English words and Chinese characters, with emoji, and a
    copy of two fifths of it plus another text; the page renders the
    highlights in one pass within a bound."""
    rnd = random.Random(35)
    words = " ".join(TEXTS[n] for n in sorted(TEXTS) if n.startswith("en")).split()
    han = [c for n in sorted(TEXTS) if n.startswith("zh") for c in TEXTS[n] if c >= "\u4e00"]
    lines = []
    size = 0
    while size < 1000 * 1024:
        line = "%d 😀 %s %s" % (len(lines), " ".join(rnd.choice(words) for _ in range(20)),
                               "".join(rnd.choice(han) for _ in range(30)))
        lines.append(line)
        size += len(line.encode()) + 1
    big = "\n".join(lines)
    while len(big.encode()) > 1024 * 1024:
        big = big[:-1000]
    status, reg = srv.json("POST", "/check-original", {"id": "big-original", "register": True,
                                                       "text": big}, headers=AUTH, timeout=120)
    check(status == 200 and reg["registered"], "register big: %s %r", status, reg)
    copy = big[:len(big) * 2 // 5] + "\n" + TEXTS["en3"]
    while len(copy.encode()) > 1024 * 1024:
        copy = copy[:-1000]
    secs = check_through_page(b, copy, keyboard=False)
    ms = int(b.js("return document.getElementById('check-result').dataset.renderMs"))
    n = b.js("return document.querySelectorAll('#sub-text mark, #src-text mark').length")
    print("     %d code points: answer shown in %.1f s, highlights rendered in %d ms, %d marks"
          % (len(copy), secs, ms, n))
    check(n > 0, "no passages highlighted in the large text")
    check(ms < 3000, "rendering the highlights took %d ms", ms)
    check(b.text("sub-text") == copy, "the pane lost text")
    # Still responsive: typing into the text area and reading it back.
    t0 = time.monotonic()
    b.by_id("check-id").send_keys("x")
    check(b.by_id("check-id").get_attribute("value") == "x", "typing lost")
    check(time.monotonic() - t0 < 5, "typing took %.1f s", time.monotonic() - t0)
    b.by_id("check-id").clear()
    b.js("document.getElementById('check-text').value = ''")


@T.test
def test_no_console_errors(srv, b):
    logs = b.collect_logs()
    bad = [e for e in logs if e.get("level") == "SEVERE"]
    # Expected: the 401 of the registration refused without a token.
    allowed = ("/check-original - Failed to load resource: the server responded with a "
               "status of 401",)
    bad = [e for e in bad if not any(a in e.get("message", "") for a in allowed)]
    check(not bad, "browser console errors: %r", bad)
    csp = [e for e in logs if "Content Security Policy" in e.get("message", "")]
    check(not csp, "CSP violations: %r", csp)


@T.test
def test_source_over_read_budget(srv, b):
    """A match whose kept text is over the check's read budget comes without
    passages ("passages_omitted"), and /compare with its id answers 409
    source_too_large: the page compares with the text it already read (runs
    after test_no_console_errors: the 409 is a logged failed load)."""
    register_original(srv)
    # The original's text after 400 KB of zero-width spaces (read as
    # nothing): registered while the original's claim is revoked (else it
    # is the original's duplicate), then the claim restored.
    big = "\u200b" * (400 * 1024 // 3) + ORIGINAL
    for action in ("revoke", "restore"):
        if action == "restore":
            status, reg = srv.json("POST", "/check-original",
                                   {"id": "zh-big", "register": True, "text": big}, headers=AUTH)
            check(status == 200 and reg["registered"], "register: %s %r", status,
                  {k: reg.get(k) for k in ("verdict", "registered", "error")})
        status, r = srv.json("POST", "/documents/zh-original/" + action,
                             {"reason": "test"}, headers=AUTH)
        check(status == 200, "%s: %s %r", action, status, r)
    ans = api_check(srv, COPY)
    idx = [i for i, m in enumerate(ans["matches"]) if m["id"] == "zh-big"]
    check(idx, "zh-big not listed: %r", [m["id"] for m in ans["matches"]])
    m = ans["matches"][idx[0]]
    check(m.get("passages_omitted") == "read_budget" and "passages" not in m, "match %r", m)
    status, pair = srv.json("POST", "/compare", {"text_a": COPY, "id_b": "zh-big"}, headers=AUTH)
    check(status == 409 and pair["error"]["code"] == "source_too_large", "%s %r", status, pair)
    status, want = srv.json("POST", "/compare", {"text_a": COPY, "text_b": big}, headers=AUTH)
    check(status == 200 and want["passages"], "compare text_b: %s", status)
    check_through_page(b, COPY)
    b.js("document.getElementById('pair-json').textContent = '';"
         "document.querySelector('#matches tbody button[data-match=\"%d\"]').click()" % idx[0])
    b.wait(lambda: b.text("pair-json"), "the pair compared with the registered text")
    b.wait(lambda: b.js("return document.getElementById('check-result').dataset.shown")
           == "zh-big", "zh-big shown")
    shown = json.loads(b.text("pair-json"))
    check(shown["passages"] == want["passages"], "the page's pair %r", shown.get("passages"))
    assert_spans(marks(b, "sub-text"), COPY, want["passages"], "submitted")
    print("     %d passages of a %d KB source over the read budget shown"
          % (len(want["passages"]), len(big.encode()) // 1024))


def main():
    if webdriver is None:
        skip("python3-selenium is not installed")
    for p in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(p):
            skip("%s is not installed (chromium, chromium-driver)" % p)
    # The LMDB store (the default): it keeps the registered texts.
    code = 1
    with Server(env={"NEARDUP_TOKEN": TOKEN}) as srv:
        try:
            b = Browser("http://127.0.0.1:%d" % srv.port)
        except Exception as e:  # noqa: BLE001 - chromium cannot run here
            skip("chromium does not start here: %s" % str(e).splitlines()[0])
        try:
            b.d.get(b.base + "/console/")
            try:
                T.run(srv, b)
            except SystemExit as e:  # the runner's verdict, once all is stopped
                code = e.code
        finally:
            b.close()
    # Here the server has stopped with SIGTERM (exit 0 checked) and its log
    # holds no sanitizer report.
    sys.exit(code)


if __name__ == "__main__":
    main()
