/* console.js - the review console: check a text, an original's page, recent
 * detections. Plain JavaScript, no framework, nothing fetched but this
 * origin's API. Every value from the API or the user goes into the page as
 * text (textContent, text nodes), never as markup; ids and meta in <bdi>
 * (an RTL override stays inside it). The bearer token lives in this tab's
 * sessionStorage only.
 *
 * Offsets: the API counts code points; JavaScript strings count UTF-16 code
 * units. unitsAt() converts, one pass over the text for all offsets. */
'use strict';

(function () {
  const TOKEN_KEY = 'neardup.console.token';
  const PAGE = 20; /* rows per page of copies, audit entries, detections */

  const $ = (id) => document.getElementById(id);

  /* An element with text children: strings become text nodes, never markup. */
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === 'className') e.className = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else e.setAttribute(k, String(v));
      }
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }
  const bidi = (s) => el('bdi', null, String(s));
  /* JSON for people: bidirectional controls (an RTL override) written as
   * \uXXXX escapes, so that they show instead of reordering the text. */
  const json = (v, indent) => JSON.stringify(v, null, indent).replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
  const fig = (x) => (typeof x === 'number' ? (Number.isInteger(x) ? String(x) : x.toFixed(4)) : '—');
  /* A share (0..1) as people read it: a whole percentage (100 x rounded
   * half to even, as Python's round() and the tests: 64.5 → 64); "under
   * 1 %" for a part that would round to none, "over 99 %" for less than
   * all that would round to all. */
  const percent = (x) => {
    if (typeof x !== 'number' || !Number.isFinite(x)) return '—';
    const y = x * 100;
    let r = Math.round(y);
    if (r - y === 0.5 && r % 2 !== 0) r -= 1;
    if (r === 0 && x > 0) return 'under 1\u00a0%';
    if (r === 100 && x < 1) return 'over 99\u00a0%';
    return r + '\u00a0%';
  };
  /* A small bar of a share (0..1); the words beside it say the figure. */
  const shareBar = (x, className) => el('meter', {
    className: 'share' + (className ? ' ' + className : ''), min: 0, max: 1,
    value: typeof x === 'number' && Number.isFinite(x) ? Math.min(Math.max(x, 0), 1) : 0, 'aria-hidden': 'true',
  });
  /* A match's kind in words (the API's name in data-kind and the title). */
  const KINDS = {
    identical: 'identical: the same text',
    near_duplicate: 'near duplicate: nearly the same text',
    partial_copy: 'partial copy: a part of it copied',
    rewrite: 'rewrite: reworded all along',
    compiled: 'compiled: part of a compilation',
    quotation: 'quotation: a large quotation',
    quoted: 'quoted: listed, not evidence',
  };
  const kindWords = (k) => KINDS[k] || String(k).replace(/_/g, ' ');
  /* A server time (RFC 3339, microseconds, UTC) shown to the second; the
   * whole stamp in its datetime and title. */
  const when = (ts) => {
    const s = String(ts);
    return el('time', { datetime: s, title: s }, s.replace('T', ' ').replace(/\.\d+Z$/, ' UTC'));
  };
  const docHash = (id) => '#/document/' + encodeURIComponent(id);
  const docPath = (id) => '/documents/' + encodeURIComponent(id);
  const docLink = (id) => el('a', { href: docHash(id) }, bidi(id));
  const accountNote = (a) => (a !== undefined && a !== null ? el('span', { className: 'detail' }, 'account ', bidi(a)) : null);

  /* Each cell of table's body gets its column's name (data-label), which
   * the narrow layout shows beside the value (console.css: table.cards). */
  function labelCells(table) {
    const names = Array.from(table.tHead.rows[0].cells).map((c) => c.textContent);
    for (const tr of table.tBodies[0].rows) {
      Array.from(tr.cells).forEach((td, i) => {
        td.dataset.label = names[i] || '';
      });
    }
  }

  /* A list read page by page into a table (copies, audit entries,
   * detections): opts.path(position) the request, opts.rows(page) its
   * rows, opts.next(page) the next position (null: the end), the "more"
   * button and the status line; opts.refused(res) may name a refusal. A
   * load supersedes the one still waiting (its answer is dropped). */
  function pager(opts) {
    const p = { position: null, gen: 0 };
    p.load = async (reset) => {
      const gen = ++p.gen;
      const tbody = $(opts.table).tBodies[0];
      if (reset) {
        p.position = null;
        tbody.replaceChildren();
      }
      $(opts.state).textContent = 'loading…';
      const res = await api('GET', opts.path(p.position));
      if (gen !== p.gen) return;
      if (res.status !== 200 || !res.json) {
        $(opts.state).textContent = (opts.refused && opts.refused(res)) || errorText(res);
        $(opts.more).hidden = true;
        return;
      }
      for (const tr of opts.rows(res.json)) tbody.appendChild(tr);
      labelCells($(opts.table));
      const next = opts.next(res.json);
      p.position = next === undefined ? null : next;
      $(opts.more).hidden = p.position === null;
      $(opts.state).textContent = tbody.rows.length ? tbody.rows.length + ' shown' : opts.empty;
    };
    $(opts.more).addEventListener('click', () => p.load(false));
    return p;
  }

  /* ---- token and API ---------------------------------------------------- */

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (e) {
      return '';
    }
  }

  function showTokenState() {
    $('token-state').textContent = token() ? 'token in use (this tab only)' : 'no token';
  }

  /* One same-origin call: {status, json} (status 0: no answer). */
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method, headers, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      return { status: 0, json: null };
    }
    let json = null;
    try {
      json = await resp.json();
    } catch (e) {
      json = null;
    }
    return { status: resp.status, json };
  }

  function errorText(res) {
    if (res.status === 0) return 'no answer from the server';
    const e = res.json && res.json.error;
    if (e) return res.status + ' ' + String(e.code) + ': ' + String(e.message);
    return 'HTTP ' + res.status;
  }

  function notice(text, isError) {
    const n = $('notice');
    n.textContent = text || '';
    n.hidden = !text;
    n.classList.toggle('error', !!isError);
  }

  /* ---- code points -------------------------------------------------------- */

  /* The number of code points of s. */
  function codePoints(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++, n++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) i++;
    }
    return n;
  }

  /* The UTF-16 index of each code-point offset of points (sorted ascending),
   * as a Map; offsets past the end map to s.length. One pass over s. */
  function unitsAt(s, points) {
    const out = new Map();
    let k = 0;
    while (k < points.length && points[k] <= 0) out.set(points[k++], 0);
    let cp = 0;
    for (let i = 0; i < s.length && k < points.length; ) {
      const c = s.charCodeAt(i);
      i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
      cp++;
      while (k < points.length && points[k] === cp) out.set(points[k++], i);
    }
    while (k < points.length) out.set(points[k++], s.length);
    return out;
  }

  /* Writes text into box with spans [{start, end, p}] (code points) marked:
   * one <mark> per stretch covered by the same spans (data-p: their p,
   * data-start/end: the stretch in code points), the first stretch of span
   * p with id side-p<p>. One DocumentFragment, text nodes between marks. */
  function renderText(box, text, spans, side) {
    const total = codePoints(text);
    const good = spans.filter((s) => Number.isInteger(s.start) && Number.isInteger(s.end) && s.start < s.end && s.start < total);
    const cuts = new Set([0, total]);
    for (const s of good) {
      cuts.add(s.start);
      cuts.add(Math.min(s.end, total));
    }
    const points = Array.from(cuts).sort((a, b) => a - b);
    const units = unitsAt(text, points);
    const frag = document.createDocumentFragment();
    const firsts = new Set();
    let done = 0; /* code units written */
    for (let i = 0; i + 1 < points.length; i++) {
      const a = points[i];
      const b = points[i + 1];
      const over = good.filter((s) => s.start <= a && s.end >= b);
      if (!over.length) continue;
      const ua = units.get(a);
      const ub = units.get(b);
      if (ua > done) frag.appendChild(document.createTextNode(text.slice(done, ua)));
      const ps = over.map((s) => s.p);
      const m = el('mark', {
        tabindex: 0,
        dataset: { p: ps.join(' '), start: String(a), end: String(b) },
        title: 'passage ' + ps.map((p) => p + 1).join(', ') + ': select to see the other side',
      }, text.slice(ua, ub));
      for (const p of ps) {
        if (!firsts.has(p)) {
          firsts.add(p);
          if (!m.id) m.id = side + '-p' + p;
        }
      }
      frag.appendChild(m);
      done = ub;
    }
    if (done < text.length) frag.appendChild(document.createTextNode(text.slice(done)));
    box.replaceChildren(frag);
    return good.length;
  }

  /* A mark chosen in one text: scrolls to its partner in the other text and
   * flashes every stretch of that passage there. */
  function followMark(mark) {
    const fromSub = mark.closest('#sub-text') !== null;
    const other = fromSub ? $('src-text') : $('sub-text');
    const p = mark.dataset.p.split(' ')[0];
    const partner = $((fromSub ? 'src' : 'sub') + '-p' + p);
    if (!partner) return;
    partner.scrollIntoView({ block: 'center', inline: 'nearest' });
    for (const m of other.querySelectorAll('mark')) {
      if (m.dataset.p.split(' ').includes(p)) {
        m.classList.remove('flash');
        void m.offsetWidth; /* restart the animation */
        m.classList.add('flash');
      }
    }
    partner.focus({ preventScroll: true });
  }

  for (const id of ['sub-text', 'src-text']) {
    $(id).addEventListener('click', (e) => {
      const m = e.target.closest('mark');
      if (m) followMark(m);
    });
    $(id).addEventListener('keydown', (e) => {
      const m = e.target.closest('mark');
      if (m && (e.key === 'Enter' || e.key === ' ')) {
        e.preventDefault();
        followMark(m);
      }
    });
    $(id).addEventListener('animationend', (e) => e.target.classList.remove('flash'));
  }

  /* ---- check page --------------------------------------------------------- */

  let checkSeq = 0; /* the latest check or match chosen; older answers are dropped */
  let lastCheck = null; /* {text, answer} */

  function countChars() {
    const n = codePoints($('check-text').value);
    $('check-count').textContent = n ? '(' + n + ' characters)' : '';
  }
  let countPending = false;
  $('check-text').addEventListener('input', () => {
    if (countPending) return;
    countPending = true;
    requestAnimationFrame(() => {
      countPending = false;
      countChars();
    });
  });
  $('check-text').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $('check-form').requestSubmit();
    }
  });

  $('check-pick-load').addEventListener('click', loadPicked);
  $('check-pick').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      loadPicked();
    }
  });

  async function loadPicked() {
    const id = $('check-pick').value;
    if (!id) return;
    $('check-state').textContent = 'loading the text of the document…';
    const res = await api('GET', docPath(id) + '?text=true');
    if (res.status !== 200) {
      $('check-state').textContent = '';
      notice('Document: ' + errorText(res), true);
      return;
    }
    if (typeof res.json.text !== 'string') {
      $('check-state').textContent = '';
      notice('The server does not give the text of this document (texts not kept).', false);
      return;
    }
    notice('');
    $('check-text').value = res.json.text;
    countChars();
    $('check-state').textContent = 'text of the document loaded';
  }

  $('check-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = $('check-text').value;
    const body = { text };
    const id = $('check-id').value;
    const account = $('check-account').value;
    if (id) body.id = id;
    if (account) body.account = account;
    body.register = $('check-register').checked;
    if (body.register && !id) {
      notice('Registering needs an id.', true);
      $('check-id').focus();
      return;
    }
    notice('');
    const seq = ++checkSeq;
    $('check-submit').disabled = true;
    $('check-state').textContent = 'checking…';
    const t0 = performance.now();
    const res = await api('POST', '/check-original', body);
    $('check-submit').disabled = false;
    if (seq !== checkSeq) return;
    if (res.status !== 200 || !res.json) {
      $('check-state').textContent = '';
      notice('Check: ' + errorText(res), true);
      return;
    }
    $('check-state').textContent = 'answered in ' + Math.round(performance.now() - t0) + ' ms';
    lastCheck = { text, answer: res.json };
    renderCheck();
  });

  function fact(dl, name, value) {
    dl.appendChild(el('dt', null, name));
    dl.appendChild(el('dd', null, value));
  }

  function metaNodes(meta) {
    const out = el('span');
    if (!meta || typeof meta !== 'object') return out;
    let first = true;
    for (const [k, v] of Object.entries(meta)) {
      if (!first) out.appendChild(document.createTextNode(' · '));
      first = false;
      const value = typeof v === 'string' ? v : json(v);
      out.appendChild(el('span', { className: 'muted' }, k + ': '));
      if (k === 'url' && /^https?:\/\//i.test(value)) {
        out.appendChild(el('a', { href: value, rel: 'noopener noreferrer', target: '_blank' }, bidi(value)));
      } else {
        out.appendChild(bidi(value));
      }
    }
    return out;
  }

  /* The match whose texts are shown first: one with passage pairs, else
   * the first partial copy (the check's passages are of that one), else
   * the first. */
  function firstShown(matches) {
    let i = matches.findIndex((m) => Array.isArray(m.passages) && m.passages.length);
    if (i < 0) i = matches.findIndex((m) => m.kind === 'partial_copy');
    return i < 0 ? 0 : i;
  }

  /* "64 % of this text is found in 2 sources", with a bar: the answer's
   * copied_share, over the sources that hold a part of it (a share above
   * 0, another account's, a claim not revoked: those copied_share counts). */
  function copiedShare(answer) {
    const x = answer.copied_share;
    const matches = Array.isArray(answer.matches) ? answer.matches : [];
    const n = matches.filter((m) => typeof m.share === 'number' && m.share > 0 && !m.same_account &&
      m.status !== 'revoked').length;
    let words;
    if (typeof x === 'number' && x > 0) {
      words = percent(x) + ' of this text is found in ' +
        (n ? n + (n === 1 ? ' source' : ' sources') : 'the sources listed');
    } else {
      words = matches.length ? 'None of this text counts as someone else\'s (the sources listed are the same account\'s or revoked)'
        : 'None of this text is found in a registered source';
    }
    if (answer.share_estimated) words += ' (estimated)';
    return el('span', { id: 'copied-share', className: 'share-line' }, shareBar(x, 'copied'),
      el('span', null, words));
  }

  function renderCheck() {
    const { answer } = lastCheck;
    $('check-result').hidden = false;
    const dl = $('verdict');
    dl.replaceChildren();
    fact(dl, 'Verdict', el('span', { className: 'verdict-' + String(answer.verdict) }, String(answer.verdict)));
    fact(dl, 'Action', String(answer.action));
    if (answer.copied_share !== undefined) fact(dl, 'Copied', copiedShare(answer));
    if (answer.source) {
      const s = el('span', null, docLink(answer.source.id));
      if (answer.show_source !== undefined) s.appendChild(el('span', { className: 'muted' }, ' show source: ' + answer.show_source + ', may modify: ' + answer.may_modify));
      fact(dl, 'Source', s);
    }
    if (answer.id !== undefined) {
      fact(dl, 'Id', bidi(answer.id));
      fact(dl, 'Registered', String(answer.registered) + (answer.registered_at ? ' at ' + answer.registered_at : ''));
      fact(dl, 'Detection recorded', String(answer.recorded));
    }
    fact(dl, 'Characters', fig(answer.chars));
    fact(dl, 'SimHash', String(answer.simhash));
    const ig = answer.integrity || {};
    fact(dl, 'Integrity', 'invisible ' + fig(ig.invisible) + ', look-alike ' + fig(ig.lookalike) +
      ', annotation ' + fig(ig.annotation) + ', reordered ' + fig(ig.reordered) +
      ', traditional ' + fig(ig.traditional) + ', script ' + String(ig.script));
    if (answer.truncated) fact(dl, 'Truncated', 'more matches exist than listed');
    if (answer.review) fact(dl, 'Review', 'a rewrite was found (listed, not counted as evidence): a person should confirm it');

    const matches = Array.isArray(answer.matches) ? answer.matches : [];
    const tbody = $('matches').tBodies[0];
    tbody.replaceChildren();
    matches.forEach((m, i) => {
      const btn = el('button', { type: 'button', dataset: { match: String(i) } }, 'Show');
      btn.addEventListener('click', () => showMatch(i));
      tbody.appendChild(el('tr', { dataset: { match: String(i) } },
        el('td', null, docLink(m.id), accountNote(m.account)),
        el('td', { className: 'kind', dataset: { kind: String(m.kind) }, title: 'kind ' + String(m.kind) }, kindWords(m.kind)),
        el('td', { className: 'num share-cell' }, typeof m.share === 'number'
          ? el('span', { className: 'share-line' }, shareBar(m.share), el('span', null, percent(m.share)))
          : el('span', { className: 'muted', title: 'not counted: beyond the 8 most contained' }, '—')),
        el('td', { className: 'num' }, fig(m.resemblance)),
        el('td', { className: 'num' }, fig(m.containment)),
        el('td', { className: 'num' }, fig(m.distance)),
        el('td', null, String(m.status || 'active') + (m.same_account ? ' (same account)' : '')),
        el('td', { className: 'num' }, when(m.registered_at)),
        el('td', null, metaNodes(m.meta)),
        el('td', null, btn)));
    });
    labelCells($('matches'));
    $('matches').parentElement.hidden = !matches.length;
    $('matches-none').hidden = !!matches.length;
    $('check-json').textContent = json(answer, 2);
    $('pair-raw').hidden = true;
    if (matches.length) {
      showMatch(firstShown(matches));
    } else {
      renderSides(null, null);
    }
  }

  /* Shows match i beside the submitted text: its registered text (GET
   * /documents/{id}?text=true, when the server keeps texts) and the
   * passages on both sides: the match's own pairs when the check gave
   * them, else POST /compare of the submitted text with the document. */
  async function showMatch(i) {
    const seq = ++checkSeq;
    const { text, answer } = lastCheck;
    const m = answer.matches[i];
    for (const tr of $('matches').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.match === String(i));
    $('src-name').textContent = m.id;
    $('src-info').textContent = 'loading…';
    const doc = await api('GET', docPath(m.id) + '?text=true');
    if (seq !== checkSeq) return;
    const srcText = doc.status === 200 && doc.json && typeof doc.json.text === 'string' ? doc.json.text : null;
    /* Without a kept text there is nothing to compare with. */
    let pair = Array.isArray(m.passages) || srcText === null ? null : await api('POST', '/compare', { text_a: text, id_b: m.id });
    /* A registered text longer than the check's read budget (409
     * source_too_large): compare with the text this page already has. */
    if (pair && pair.status === 409 && pair.json && pair.json.error && pair.json.error.code === 'source_too_large' && seq === checkSeq)
      pair = await api('POST', '/compare', { text_a: text, text_b: srcText });
    if (seq !== checkSeq) return;
    const compared = pair && pair.status === 200 && pair.json && Array.isArray(pair.json.passages) ? pair.json : null;
    $('pair-json').textContent = compared ? json(compared, 2) : '';
    $('pair-raw').hidden = !compared;
    renderSides(m, srcText, i === answer.matches.findIndex((x) => x.kind === 'partial_copy'), compared);
  }

  function renderSides(m, srcText, bestPartial, compared) {
    const t0 = performance.now();
    const { text, answer } = lastCheck;
    let sub = [];
    let src = [];
    let note;
    const pairs = m && Array.isArray(m.passages) ? m.passages : compared ? compared.passages : null;
    if (pairs) {
      pairs.forEach((p, i) => {
        sub.push({ start: p.start, end: p.end, p: i });
        if (Number.isInteger(p.source_start)) src.push({ start: p.source_start, end: p.source_end, p: i });
      });
      note = m && m.kind === 'rewrite'
        ? pairs.length + ' aligned stretch(es) of a rewrite on both sides (the submitted text follows the registered one, reworded: ' +
          fig(m.alignment ? m.alignment.coverage : null) + ' of it aligned); select one to see it in the other text.'
        : pairs.length + ' copied passage(s) on both sides; select one to see it in the other text.';
      if (compared) {
        note += ' The pair alone: ' + (compared.kind ? kindWords(compared.kind) : 'under every bar') +
          ', resemblance ' + fig(compared.resemblance) +
          ', containment ' + fig(compared.containment) + ' (of the submitted text), ' +
          fig(compared.containment_reverse) + ' (of the registered one)' +
          (compared.passages_truncated ? '; more passages than listed.' : '.');
      }
    } else if (m && bestPartial && Array.isArray(answer.passages)) {
      sub = answer.passages.map((p, i) => ({ start: p.start, end: p.end, p: i }));
      note = sub.length + ' copied passage(s) in the submitted text (this server gives the submitted side only).';
    } else {
      note = m ? 'No passages listed for this match.' : 'Nothing matched.';
    }
    $('sides-note').textContent = note;
    const nsub = renderText($('sub-text'), text, sub, 'sub');
    $('sub-info').textContent = '(' + nsub + ' passages)';
    if (srcText !== null && srcText !== undefined) {
      const nsrc = renderText($('src-text'), srcText, src, 'src');
      $('src-info').textContent = '(' + nsrc + ' passages)';
    } else {
      $('src-text').replaceChildren(el('span', { className: 'muted' }, m ? 'The server does not give the registered text.' : ''));
      $('src-info').textContent = '';
      if (!m) $('src-name').textContent = '';
    }
    $('check-result').dataset.renderMs = String(Math.round(performance.now() - t0));
    $('check-result').dataset.shown = m ? m.id : '';
  }

  /* ---- an original's page ------------------------------------------------- */

  let docId = null;
  let docStatus = 'active';

  async function showDocument(id) {
    docId = id;
    $('doc-name').textContent = id;
    $('doc-record').replaceChildren();
    $('doc-policy').textContent = '';
    $('copies').tBodies[0].replaceChildren();
    $('audit').tBodies[0].replaceChildren();
    $('claim-state').textContent = '';
    $('doc-text').hidden = true;
    $('doc-text').textContent = '';
    $('doc-text-state').textContent = '';
    await loadRecord();
    if (docId !== id) return;
    await Promise.all([copies.load(true), audit.load(true)]);
  }

  async function loadRecord() {
    const id = docId;
    const res = await api('GET', docPath(id));
    if (id !== docId) return;
    if (res.status !== 200 || !res.json) {
      notice('Document: ' + errorText(res), true);
      $('claim-form').hidden = true;
      return;
    }
    notice('');
    const d = res.json;
    const dl = $('doc-record');
    dl.replaceChildren();
    fact(dl, 'Id', bidi(d.id));
    docStatus = d.status || 'active';
    fact(dl, 'Status', el('span', { id: 'doc-status' }, docStatus));
    if (d.superseded_by) {
      fact(dl, 'Superseded by', d.superseded_by.id !== undefined ? docLink(d.superseded_by.id) : 'a deleted document registered at ' + d.superseded_by.registered_at);
    }
    fact(dl, 'Account', d.account !== undefined ? bidi(d.account) : 'none');
    fact(dl, 'Registered', String(d.registered_at));
    fact(dl, 'Characters', fig(d.chars));
    fact(dl, 'SimHash', String(d.simhash));
    fact(dl, 'Version', String(d.version));
    fact(dl, 'Meta', d.meta ? metaNodes(d.meta) : 'none');
    $('doc-policy').textContent = d.policy ? json(d.policy, 2) : 'none (the server\'s default reprint rule applies)';
    $('claim-form').hidden = false;
    $('claim-revoke').hidden = docStatus === 'revoked';
    $('claim-restore').hidden = docStatus === 'active';
  }

  const copies = pager({
    table: 'copies',
    state: 'copies-state',
    more: 'copies-more',
    empty: 'no copies found',
    path: (cursor) => docPath(docId) + '/copies?limit=' + PAGE + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''),
    next: (page) => page.next_cursor,
    rows: (page) => (page.copies || []).map((c) => el('tr', null,
      el('td', null, bidi(c.id)),
      el('td', null, c.account !== undefined && c.account !== null ? bidi(c.account) : '—'),
      el('td', null, String(c.kind)),
      el('td', { className: 'num' }, fig(c.resemblance)),
      el('td', { className: 'num' }, fig(c.containment)),
      el('td', { className: 'num' }, fig(c.distance)),
      el('td', { className: 'num' }, when(c.detected_at)))),
  });

  function auditDetail(detail) {
    if (!detail || typeof detail !== 'object') return '';
    const parts = [];
    if (typeof detail.status === 'string') parts.push('status ' + detail.status);
    if (typeof detail.reason === 'string') parts.push('reason: ' + detail.reason);
    const rest = Object.assign({}, detail);
    delete rest.status;
    delete rest.reason;
    const more = Object.keys(rest).length ? json(rest) : '';
    return el('span', null, bidi(parts.join('; ')), more ? el('span', { className: 'detail' }, more) : null);
  }

  const audit = pager({
    table: 'audit',
    state: 'audit-state',
    more: 'audit-more',
    empty: 'no entries',
    refused: (res) => (res.status === 401 ? 'the audit log needs a token' : null),
    path: (cursor) => '/audit?document=' + encodeURIComponent(docId) + '&limit=' + PAGE +
      (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''),
    next: (page) => page.next_cursor,
    rows: (page) => (page.entries || []).map((a) => el('tr', { dataset: { action: String(a.action) } },
      el('td', { className: 'num' }, when(a.at)),
      el('td', null, a.client !== null && a.client !== undefined ? bidi(a.client) : '—'),
      el('td', null, String(a.action)),
      el('td', null, auditDetail(a.detail)))),
  });


  /* The document's kept text (GET /documents/{id}?text=true), on request. */
  $('doc-text-show').addEventListener('click', async () => {
    const id = docId;
    $('doc-text-state').textContent = 'loading…';
    const res = await api('GET', docPath(id) + '?text=true');
    if (id !== docId) return;
    if (res.status !== 200 || !res.json) {
      $('doc-text-state').textContent = errorText(res);
      return;
    }
    if (typeof res.json.text !== 'string') {
      $('doc-text-state').textContent = 'the server keeps no text of this document';
      return;
    }
    $('doc-text').textContent = res.json.text;
    $('doc-text').hidden = false;
    $('doc-text-state').textContent = codePoints(res.json.text) + ' characters';
  });

  $('claim-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const action = e.submitter && e.submitter.value ? e.submitter.value : docStatus === 'active' ? 'revoke' : 'restore';
    const id = docId;
    const reason = $('claim-reason').value;
    const body = reason ? { reason } : {};
    for (const b of [$('claim-revoke'), $('claim-restore')]) b.disabled = true;
    $('claim-state').textContent = action === 'revoke' ? 'revoking…' : 'restoring…';
    const res = await api('POST', docPath(id) + '/' + action, body);
    for (const b of [$('claim-revoke'), $('claim-restore')]) b.disabled = false;
    if (id !== docId) return;
    if (res.status !== 200 || !res.json) {
      $('claim-state').textContent = '';
      notice((action === 'revoke' ? 'Revoke: ' : 'Restore: ') + errorText(res), true);
      return;
    }
    notice('');
    $('claim-reason').value = '';
    $('claim-state').textContent = 'status now ' + String(res.json.status);
    await loadRecord();
    await audit.load(true);
    (docStatus === 'active' ? $('claim-revoke') : $('claim-restore')).focus();
  });

  /* ---- recent detections -------------------------------------------------- */

  const detections = pager({
    table: 'detections',
    state: 'det-state',
    more: 'det-older',
    empty: 'no detections yet',
    refused: (res) => (res.status === 404 ? 'this server has no events feed (GET /events)' : null),
    path: (before) => '/events?order=desc&type=copy.detected&limit=' + PAGE +
      (before !== null ? '&before=' + encodeURIComponent(before) : ''),
    next: (page) => page.next_before,
    rows: (page) => (page.events || []).map((ev) => {
      const d = ev.data || {};
      const copy = d.copy || {};
      const orig = d.original || {};
      return el('tr', { dataset: { seq: String(ev.seq) } },
        el('td', { className: 'num' }, when(ev.at)),
        el('td', null, bidi(String(copy.id)), accountNote(copy.account)),
        el('td', null, orig.id !== undefined ? docLink(String(orig.id)) : '—', accountNote(orig.account)),
        el('td', null, String(d.kind)),
        el('td', { className: 'num' }, fig(d.resemblance)),
        el('td', { className: 'num' }, fig(d.containment)),
        el('td', { className: 'num' }, fig(d.distance)));
    }),
  });

  $('det-newest').addEventListener('click', () => detections.load(true));

  /* ---- token, navigation -------------------------------------------------- */

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const t = $('token').value.trim();
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
    } catch (err) {
      notice('This browser keeps no session storage: the token cannot be used.', true);
    }
    $('token').value = '';
    showTokenState();
    route();
  });
  $('token-forget').addEventListener('click', () => {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (err) {
      /* nothing kept */
    }
    showTokenState();
  });

  $('open-doc').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = $('open-doc-id').value;
    if (id) location.hash = docHash(id);
  });

  let firstRoute = true;

  function route() {
    const h = location.hash || '#/check';
    let page = 'check';
    let id = null;
    notice('');
    if (h.startsWith('#/document/')) {
      try {
        id = decodeURIComponent(h.slice('#/document/'.length));
        page = 'document';
      } catch (e) {
        notice('That link does not name a document.', true);
      }
    } else if (h === '#/detections') {
      page = 'detections';
    }
    for (const p of ['check', 'document', 'detections']) $('page-' + p).hidden = p !== page;
    $('nav-check').toggleAttribute('aria-current', page === 'check');
    $('nav-detections').toggleAttribute('aria-current', page === 'detections');
    if (page === 'check') $('nav-check').setAttribute('aria-current', 'page');
    if (page === 'detections') $('nav-detections').setAttribute('aria-current', 'page');
    if (page === 'document') showDocument(id);
    if (page === 'detections') detections.load(true);
    if (!firstRoute) {
      const h1 = $('page-' + page).querySelector('h1');
      h1.setAttribute('tabindex', '-1');
      h1.focus();
    }
    firstRoute = false;
  }

  window.addEventListener('hashchange', route);
  showTokenState();
  route();
})();
