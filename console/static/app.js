// SmartFeed console. Every JSON call is the Connect protocol (POST rpc/<service>/<method>)
// transcoded by the server into the same gRPC services a client calls; the counters come from
// the admin listener's /metrics.
'use strict';

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

// ---- credentials and calls ----
for (const [id, key] of [['user-token', 'sf.userToken'], ['admin-token', 'sf.adminToken']]) {
  const input = $(id);
  input.value = sessionStorage.getItem(key) || '';
  input.addEventListener('change', () => sessionStorage.setItem(key, input.value.trim()));
}

// CALL_TIMEOUT_MS bounds each request, so a poll waiting on a stuck one ends and the next runs.
const CALL_TIMEOUT_MS = 20000;

async function rpc(method, body, admin) {
  const headers = { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' };
  const tok = sessionStorage.getItem(admin ? 'sf.adminToken' : 'sf.userToken');
  if (tok) headers.Authorization = 'Bearer ' + tok;
  const r = await fetch('rpc/' + method, { method: 'POST', headers, body: JSON.stringify(body || {}), signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) {
    const err = new Error((j.code || ('HTTP ' + r.status)) + (j.message ? ': ' + j.message : ''));
    err.code = j.code || String(r.status);
    throw err;
  }
  return j;
}
const FEED = 'smartfeed.feed.v1.FeedService/';
const GRAPH = 'smartfeed.graph.v1.GraphService/';
const ADMIN = 'smartfeed.feed.v1.FeedAdmin/';
const GEN = 'smartfeed.generator.v1.GeneratorService/';

function showError(id, err) {
  const e = $(id);
  if (!err) { e.hidden = true; e.textContent = ''; return; }
  e.hidden = false;
  e.textContent = String(err.message || err);
}

// ---- pages ----
const pages = ['feed', 'failover', 'queues'];
let timer = null;
// The hash is the page, optionally with parameters: #feed?user=<id or username>.
function route() {
  const [name, query] = location.hash.slice(1).split('?');
  const page = pages.includes(name) ? name : 'feed';
  const params = new URLSearchParams(query || '');
  if (page === 'feed' && params.get('user') && params.get('user') !== $('feed-user').value) {
    $('feed-user').value = params.get('user');
    feed.userId = '';
  }
  for (const p of pages) {
    $('page-' + p).hidden = p !== page;
    $('nav-' + p).classList.toggle('on', p === page);
  }
  clearInterval(timer);
  timer = null;
  if (page === 'failover') { pollFailover(); timer = setInterval(pollFailover, 2000); }
  if (page === 'queues') { pollQueues(); timer = setInterval(pollQueues, 3000); }
  if (page === 'feed') { pollExperiment(); timer = setInterval(pollExperiment, 5000); }
  if (page === 'feed' && !feed.userId && $('feed-user').value) loadFeed();
}
window.addEventListener('hashchange', route);

// ---- feed ----
const feed = { userId: '', cursor: '', pages: 0, seen: new Set(), repeats: 0, loading: false, done: false, names: new Map() };

function sourceName(s) {
  return ({ SOURCE_FOLLOWING: 'following', SOURCE_INTEREST: 'interest', SOURCE_RELATED: 'related' })[s] || 'unknown';
}
function hue(id) { let h = 0; for (const c of id) h = (h * 31 + c.charCodeAt(0)) % 360; return h; }

// resolveUser takes a user ID or a username and returns the ID, showing the username.
async function resolveUser(v) {
  v = v.trim();
  const u = /^\d+$/.test(v) ? await rpc(GRAPH + 'GetUser', { userIdStr: v }) : await rpc(GRAPH + 'GetUserByName', { username: v });
  $('feed-who').textContent = u.username ? '@' + u.username : '';
  return u.idStr || v;
}

// describe fetches the pins' details and their authors' names (GraphService.GetObjects).
async function describe(items) {
  const ids = items.map((it) => it.pinIdStr);
  const info = new Map();
  if (!ids.length) return info;
  try {
    const pins = await rpc(GRAPH + 'GetObjects', { idsStr: ids });
    const authors = new Set();
    for (const o of pins.objects || []) {
      if (o.pin) { info.set(o.pin.idStr, o.pin); if (!feed.names.has(o.pin.authorIdStr)) authors.add(o.pin.authorIdStr); }
    }
    if (authors.size) {
      const us = await rpc(GRAPH + 'GetObjects', { idsStr: [...authors] });
      for (const o of us.objects || []) if (o.user) feed.names.set(o.user.idStr, o.user.username);
    }
  } catch (e) { /* the grid shows IDs without the details */ }
  return info;
}

function card(it, pin) {
  const c = el('div', 'pin');
  c.dataset.pin = it.pinIdStr;
  const sw = el('div', 'swatch');
  sw.style.background = 'hsl(' + hue(it.pinIdStr) + ' 55% 78%)';
  c.append(sw, el('div', 'title', (pin && pin.details) || ('pin …' + it.pinIdStr.slice(-8))));
  c.title = 'pin ' + it.pinIdStr;
  const src = sourceName(it.source);
  const author = it.authorId ? (feed.names.get(it.authorId) || ('user ' + it.authorId)) : '';
  c.append(el('span', 'badge b-' + src, src), el('span', 'badge', 'score ' + (it.score || 0).toFixed(3)),
    el('span', 'badge ' + (it.fresh ? 'b-fresh' : 'b-mat'), it.fresh ? 'fresh' : 'materialized'));
  if (author) c.append(el('span', 'badge b-author', '@' + author));
  c.addEventListener('click', () => explain(it, pin, author));
  return c;
}

function explain(it, pin, author) {
  const a = $('feed-explain');
  a.hidden = false;
  a.replaceChildren(el('h3', '', 'Why this pin'));
  const dl = el('dl');
  const row = (k, v) => { dl.append(el('dt', '', k), el('dd', '', v)); };
  row('pin', it.pinIdStr);
  row('generator reason', it.reason || '(none recorded)');
  row('source', sourceName(it.source));
  row('score', String(it.score || 0));
  row('fresh', it.fresh ? 'yes: generated for this request' : 'no: materialized earlier');
  row('author', author || '–');
  row('board', it.boardId || '–');
  if (pin && pin.link) row('link', pin.link);
  a.append(dl);
  explainNow(a);
}

// explainNow shows what the generator would do for this user now (GeneratorService.PreviewChunk,
// which takes nothing): the size wanted, each source's rate, quota, pins chosen and deferred,
// and the generator's own explanation lines.
async function explainNow(a) {
  const box = el('div', 'gen-now');
  box.id = 'feed-gen-now';
  box.append(el('h4', '', 'The generator now'), el('small', 'muted', 'loading…'));
  a.append(box);
  let p;
  try {
    p = await rpc(GEN + 'PreviewChunk', { userStr: feed.userId });
  } catch (e) {
    box.replaceChildren(el('h4', '', 'The generator now'), el('small', 'muted', 'not available here (' + (e.message || e) + ')'));
    return;
  }
  const items = (p.chunk && p.chunk.items) || [];
  box.replaceChildren(el('h4', '', 'The generator now'),
    el('p', 'muted', 'Its next chunk would hold ' + items.length + ' of ' + (p.wanted || 0) + ' wanted; ' + (p.deferred || []).length + ' weak pins deferred. Nothing is taken by this preview.'));
  const t = el('table', 'rates');
  const head = el('tr');
  for (const h of ['source', 'rate', 'quota', 'chosen', 'read', 'deferred']) head.append(el('th', '', h));
  t.append(head);
  for (const s of p.sources || []) {
    const r = el('tr');
    r.dataset.source = s.name;
    r.title = s.name + ': pins under ' + (s.threshold || 0).toFixed(3) + ' are weak (deferred unless the chunk is under its minimum)';
    for (const v of [s.name, ((s.rate || 0) * 100).toFixed(0) + '%', s.quota || 0, s.chosen || 0, s.candidates || 0, s.deferred || 0]) r.append(el('td', '', String(v)));
    t.append(r);
  }
  box.append(t);
  const why = el('details');
  why.append(el('summary', '', 'why (the generator\'s explanation)'));
  const ol = el('ul', 'debug');
  for (const line of (p.chunk && p.chunk.debug) || []) ol.append(el('li', '', line));
  why.append(ol);
  box.append(why);
}

function pageStats(r) {
  $('feed-pages').textContent = feed.pages;
  $('feed-count').textContent = feed.seen.size;
  $('feed-repeats').textContent = feed.repeats;
  $('feed-from').textContent = (r.servedFrom || 'STORE_UNSPECIFIED').replace('STORE_', '').toLowerCase();
  $('feed-hedged').textContent = r.hedged ? '(hedged)' : '';
  $('feed-fresh').textContent = (r.freshStatus || '').replace('FRESH_STATUS_', '').toLowerCase() + (r.rebuilding ? ' · rebuilding' : '');
}

async function fetchPage(cursor) {
  const size = Number($('feed-size').value) || 25;
  return rpc(FEED + 'GetFeed', { userIdStr: feed.userId, cursor, pageSize: size });
}

async function loadFeed(ev) {
  if (ev) ev.preventDefault();
  showError('feed-error');
  Object.assign(feed, { cursor: '', pages: 0, seen: new Set(), repeats: 0, done: false });
  $('feed-grid').replaceChildren();
  $('feed-explain').hidden = true;
  try {
    feed.userId = await resolveUser($('feed-user').value);
  } catch (e) { showError('feed-error', e); return; }
  await more();
}

// more appends the next page at the cursor; items already shown count as repeats and are not
// shown twice.
async function more() {
  if (feed.loading || feed.done || !feed.userId) return;
  feed.loading = true;
  $('feed-status').textContent = 'loading…';
  try {
    const r = await fetchPage(feed.cursor);
    const items = r.items || [];
    const info = await describe(items);
    const grid = $('feed-grid');
    for (const it of items) {
      if (feed.seen.has(it.pinIdStr)) { feed.repeats++; continue; }
      feed.seen.add(it.pinIdStr);
      grid.append(card(it, info.get(it.pinIdStr)));
    }
    feed.pages++;
    feed.cursor = r.nextCursor || '';
    feed.done = !feed.cursor;
    $('feed-end').textContent = feed.done ? 'end of the feed' : 'scroll for more';
    pageStats(r);
    $('feed-status').textContent = '';
  } catch (e) {
    showError('feed-error', e);
    $('feed-status').textContent = '';
  } finally {
    feed.loading = false;
  }
  // A short page may leave the end marker on screen: keep loading.
  if (!feed.done && visible($('feed-end'))) setTimeout(more, 0);
}

// refresh asks for the first page again and puts what was not shown yet on top, as a chunk.
async function refresh() {
  if (!feed.userId) return loadFeed();
  showError('feed-error');
  try {
    const r = await fetchPage('');
    const items = (r.items || []).filter((it) => !feed.seen.has(it.pinIdStr));
    const info = await describe(items);
    const grid = $('feed-grid');
    const first = grid.firstChild;
    const sep = el('div', 'chunk-sep', items.length ? 'new: ' + items.length + ' pins at ' + new Date().toLocaleTimeString() : 'nothing new at ' + new Date().toLocaleTimeString());
    grid.insertBefore(sep, first);
    for (const it of items) {
      feed.seen.add(it.pinIdStr);
      grid.insertBefore(card(it, info.get(it.pinIdStr)), first);
    }
    pageStats(r);
  } catch (e) { showError('feed-error', e); }
}

function visible(e) {
  const r = e.getBoundingClientRect();
  return r.top < window.innerHeight && r.bottom >= 0;
}
new IntersectionObserver((es) => { if (es.some((e) => e.isIntersecting)) more(); }).observe($('feed-end'));
$('feed-form').addEventListener('submit', loadFeed);
$('feed-refresh').addEventListener('click', refresh);

// ---- metrics (Prometheus text exposition) ----
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const l of m[2].slice(1, -1).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}
const sum = (ms, name, where) => ms.filter((m) => m.name === name && Object.entries(where || {}).every(([k, v]) => m.labels[k] === v))
  .reduce((a, m) => a + m.value, 0);

// hist returns the cumulative buckets of a histogram: [{le, cum}], +Inf last.
function hist(ms, name, where) {
  const bs = ms.filter((m) => m.name === name + '_bucket' && Object.entries(where).every(([k, v]) => m.labels[k] === v))
    .map((m) => ({ le: m.labels.le === '+Inf' ? Infinity : Number(m.labels.le), cum: m.value }));
  bs.sort((a, b) => a.le - b.le);
  return bs;
}
const count = (h) => (h.length ? h[h.length - 1].cum : 0);
// quantile interpolates inside the bucket, like histogram_quantile (and hedge show).
function quantile(h, q) {
  const n = count(h);
  if (!n) return NaN;
  const rank = q * n;
  let lower = 0, prev = 0;
  for (const b of h) {
    if (b.cum >= rank) {
      if (b.le === Infinity) return lower;
      const inB = b.cum - prev;
      return inB === 0 ? b.le : lower + (b.le - lower) * (rank - prev) / inB;
    }
    lower = b.le; prev = b.cum;
  }
  return lower;
}
const fmtMs = (s) => (Number.isFinite(s) ? (s * 1000).toFixed(s < 0.01 ? 2 : 1) + ' ms' : '–');

async function metrics() {
  const r = await fetch('/metrics', { signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  if (!r.ok) throw new Error('/metrics: HTTP ' + r.status);
  return parseMetrics(await r.text());
}

// ---- experiment (feed page) ----
// wilson returns k/n and its Wilson score 95% interval (engagement.Wilson in Go).
function wilson(k, n) {
  if (!n) return [0, 0, 0];
  const z = 1.96, p = k / n, z2 = z * z;
  const d = 1 + z2 / n, c = (p + z2 / (2 * n)) / d;
  const h = z * Math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / d;
  return [p, Math.max(0, c - h), Math.min(1, c + h)];
}
const POSITIVE = ['closeup', 'click', 'save', 'like'];

// experimentArms reads each arm's model, share of users, impressions and engagements from the
// metrics: smartfeed_experiment_arm_percent{arm, model} and smartfeed_engagement_events_total.
function experimentArms(ms) {
  const arms = new Map();
  const arm = (name) => {
    if (!arms.has(name)) arms.set(name, { arm: name, model: '–', percent: NaN, impressions: 0, engagements: 0 });
    return arms.get(name);
  };
  for (const m of ms) {
    if (m.name === 'smartfeed_experiment_arm_percent') {
      const a = arm(m.labels.arm);
      a.model = m.labels.model; a.percent = m.value;
    } else if (m.name === 'smartfeed_engagement_events_total') {
      const a = arm(m.labels.arm);
      if (m.labels.action === 'impression') a.impressions += m.value;
      else if (POSITIVE.includes(m.labels.action)) a.engagements += m.value;
    }
  }
  return [...arms.values()].sort((x, y) => x.arm.localeCompare(y.arm));
}

async function pollExperiment() {
  let ms;
  try { ms = await metrics(); } catch (e) { $('exp-note').textContent = e.message; return; }
  const tb = $('exp-arms').tBodies[0];
  tb.replaceChildren();
  const pct = (v) => (100 * v).toFixed(2) + '%';
  for (const a of experimentArms(ms)) {
    // Several engagements of one impression count once each: the interval treats the rate as
    // a proportion, so it is capped at one engagement per impression.
    const [rate, lo, hi] = wilson(Math.min(a.engagements, a.impressions), a.impressions);
    const tr = el('tr');
    tr.dataset.arm = a.arm;
    tr.append(el('td', '', a.arm), el('td', 'model', a.model),
      el('td', '', Number.isFinite(a.percent) ? a.percent + '%' : '–'),
      el('td', 'impressions', String(a.impressions)), el('td', 'engagements', String(a.engagements)),
      el('td', 'rate', a.impressions ? pct(rate) : '–'),
      el('td', 'ci', a.impressions ? pct(lo) + ' – ' + pct(hi) : '–'));
    tb.append(tr);
  }
  $('exp-logged').textContent = sum(ms, 'smartfeed_impressions_logged_total');
  $('exp-dropped').textContent = sum(ms, 'smartfeed_impressions_dropped_total');
  $('exp-note').textContent = tb.rows.length ? '' : '(no experiment metrics in this process: open the console of a worker)';
}

// ---- failover ----
const fo = { lastServed: null, primary: [], standby: [], policy: null, knobsLoaded: false, suggested: false, polling: false, faultSeq: 0 };

async function pollFailover() {
  // One poll at a time: under load a poll can outlast the interval, and overlapping polls
  // answer out of order.
  if (fo.polling) return;
  fo.polling = true;
  try { await pollFailoverOnce(); } finally { fo.polling = false; }
}

async function pollFailoverOnce() {
  const errs = [];
  let ms = [];
  try { ms = await metrics(); } catch (e) { errs.push(e.message); }
  const stdby = sum(ms, 'smartfeed_feed_served_from_total', { store: 'standby' });
  const prim = sum(ms, 'smartfeed_feed_served_from_total', { store: 'primary' });
  if (fo.lastServed) {
    const ds = stdby - fo.lastServed.s, dp = prim - fo.lastServed.p;
    $('fo-standby-rate').textContent = ds + dp > 0 ? (100 * ds / (ds + dp)).toFixed(0) + '%' : 'no reads';
  }
  fo.lastServed = { s: stdby, p: prim };
  $('fo-standby-total').textContent = stdby;
  $('fo-pages-total').textContent = stdby + prim;
  $('fo-issued').textContent = sum(ms, 'smartfeed_hedge_issued_total');
  $('fo-won').textContent = sum(ms, 'smartfeed_hedge_won_total');
  $('fo-exhausted').textContent = sum(ms, 'smartfeed_hedge_budget_exhausted_total');
  $('fo-calls').textContent = sum(ms, 'smartfeed_hedge_calls_total');
  fo.primary = hist(ms, 'smartfeed_hedge_read_seconds', { store: 'primary' });
  fo.standby = hist(ms, 'smartfeed_hedge_read_seconds', { store: 'standby' });
  const tb = $('fo-lat').tBodies[0];
  tb.replaceChildren();
  for (const [name, h] of [['primary', fo.primary], ['standby', fo.standby]]) {
    const tr = el('tr');
    tr.append(el('td', '', name), el('td', '', String(count(h))));
    for (const q of [0.5, 0.9, 0.99, 0.999]) tr.append(el('td', '', fmtMs(quantile(h, q))));
    tb.append(tr);
  }
  queueTable(ms, $('fo-queues').tBodies[0]);
  try {
    const p = await rpc(ADMIN + 'GetHedgePolicy', {}, true);
    fo.policy = p;
    $('fo-cutoff').textContent = fmtMs((p.currentCutoffMs || 0) / 1000);
    $('fo-mode').textContent = 'mode ' + (p.mode || '–') + (p.mode === 'percentile' ? ' p' + p.percentile : '') + ', budget ' + (p.budget || 0);
    if (!fo.knobsLoaded) fillKnobs(p);
  } catch (e) { errs.push('hedge policy: ' + e.message); }
  try {
    const r = await rpc(ADMIN + 'GetReplication', {}, true);
    $('fo-lag').textContent = fmtMs((r.lagMs || 0) / 1000);
    $('fo-repl').textContent = (r.mechanism || '?') + ' · bound ' + (r.maxStalenessMs ? r.maxStalenessMs + ' ms' : 'none') +
      (r.standbyRefused ? ' · STANDBY REFUSED (stale)' : '') + ' · p99 ' + (r.recentP99Ms || 0).toFixed(1) + ' ms';
  } catch (e) { errs.push('replication: ' + e.message); }
  // A fault set by a click after this read began is newer than the read's answer: shown as set.
  const faultSeq = fo.faultSeq;
  try {
    const f = await rpc(ADMIN + 'GetFaults', { store: 'STORE_PRIMARY' }, true);
    const state = f.outage ? 'stop' : (f.baseMs > 0 || f.slowFraction > 0) ? 'slow' : 'normal';
    if (fo.faultSeq === faultSeq) {
      for (const b of $('fo-primary').querySelectorAll('button')) b.classList.toggle('on', b.dataset.fault === state);
      $('fo-primary-state').textContent = 'primary: ' + state;
    }
  } catch (e) { if (fo.faultSeq === faultSeq) $('fo-primary-state').textContent = 'faults: ' + e.message; }
  drawCurve();
  if (!fo.suggested && fo.policy && count(fo.primary) && count(fo.standby)) { fo.suggested = true; $('fo-suggest').requestSubmit(); }
  showError('fo-error', errs.length ? errs.join(' · ') : null);
}

function fillKnobs(p) {
  const f = $('fo-knobs');
  for (const k of ['mode', 'delayMs', 'percentile', 'minMs', 'maxMs', 'budget', 'budgetBurst', 'warmup', 'minSamples']) {
    f.elements[k].value = p[k] === undefined ? (k === 'mode' ? 'off' : 0) : p[k];
  }
  fo.knobsLoaded = true;
}

$('fo-knobs').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const body = { mode: f.elements.mode.value };
  for (const k of ['delayMs', 'percentile', 'minMs', 'maxMs', 'budget', 'budgetBurst', 'warmup']) body[k] = Number(f.elements[k].value);
  body.minSamples = parseInt(f.elements.minSamples.value, 10) || 0;
  try {
    const p = await rpc(ADMIN + 'SetHedgePolicy', body, true);
    fillKnobs(p);
    $('fo-knobs-status').textContent = 'applied at ' + new Date().toLocaleTimeString();
  } catch (e) { $('fo-knobs-status').textContent = 'refused: ' + e.message; }
});

for (const b of $('fo-primary').querySelectorAll('button')) {
  b.addEventListener('click', async () => {
    const mix = { normal: {}, slow: { baseMs: 200, jitterMs: 20 }, stop: { outage: true } }[b.dataset.fault];
    fo.faultSeq++;
    try {
      await rpc(ADMIN + 'SetFaults', Object.assign({ store: 'STORE_PRIMARY' }, mix), true);
      $('fo-primary-state').textContent = 'primary: ' + b.dataset.fault;
      for (const o of $('fo-primary').querySelectorAll('button')) o.classList.toggle('on', o === b);
    } catch (e) { $('fo-primary-state').textContent = 'refused: ' + e.message; }
  });
}

// drawCurve draws the primary's latency CDF and where the cutoff sits on it.
function drawCurve() {
  const svg = $('fo-curve');
  const W = 640, H = 180, L = 40, B = 20;
  const h = fo.primary, n = count(h);
  const parts = ['<rect x="0" y="0" width="' + W + '" height="' + H + '" fill="#fff"/>'];
  if (n) {
    const fin = h.filter((b) => b.le !== Infinity);
    const maxS = Math.max(fin[fin.length - 1].le, 0.001);
    const x = (s) => L + (W - L - 10) * Math.log10(1 + 1000 * s) / Math.log10(1 + 1000 * maxS);
    const y = (f) => H - B - (H - B - 10) * f;
    let d = 'M' + x(0) + ',' + y(0);
    for (const b of fin) d += ' L' + x(b.le).toFixed(1) + ',' + y(b.cum / n).toFixed(1);
    parts.push('<path d="' + d + '" fill="none" stroke="#1d1d1f" stroke-width="2"/>');
    const sn = count(fo.standby);
    if (sn) {
      let ds = 'M' + x(0) + ',' + y(0);
      for (const b of fo.standby.filter((b) => b.le !== Infinity && b.le <= maxS)) ds += ' L' + x(b.le).toFixed(1) + ',' + y(b.cum / sn).toFixed(1);
      parts.push('<path d="' + ds + '" fill="none" stroke="#2f6fd6" stroke-width="1.5" stroke-dasharray="5 3"/>');
    }
    parts.push('<text x="' + (W - 150) + '" y="' + (H - B - 30) + '">— primary</text><text x="' + (W - 150) + '" y="' + (H - B - 16) + '" style="fill:#2f6fd6">- - standby</text>');
    const cut = fo.policy ? (fo.policy.currentCutoffMs || 0) / 1000 : 0;
    if (cut > 0) {
      const cx = x(Math.min(cut, maxS)).toFixed(1);
      parts.push('<line x1="' + cx + '" x2="' + cx + '" y1="10" y2="' + (H - B) + '" stroke="#c8102e" stroke-dasharray="4 3"/>');
      parts.push('<text x="' + (Number(cx) + 4) + '" y="20">cutoff ' + fmtMs(cut) + '</text>');
    }
    for (const s of [0.001, 0.01, 0.1, 1]) if (s <= maxS) parts.push('<text x="' + x(s) + '" y="' + (H - 5) + '">' + fmtMs(s) + '</text>');
    parts.push('<text x="2" y="14">CDF</text><text x="2" y="' + (H - B) + '">0</text>');
  } else {
    parts.push('<text x="20" y="90">no primary reads recorded yet</text>');
  }
  svg.innerHTML = parts.join('');
}

// suggest replays samples calls drawn from the recorded histograms for each cutoff, with the
// hedge budget as a token bucket (the same model as smartfeed hedge suggest).
function sampler(h, rnd) {
  const n = count(h);
  return () => {
    const k = Math.floor(rnd() * n) + 1;
    let i = h.findIndex((b) => b.cum >= k);
    const lower = i > 0 ? h[i - 1].le : 0;
    let upper = h[i].le;
    if (upper === Infinity) upper = 2 * lower;
    return lower + rnd() * (upper - lower);
  };
}
function mulberry32(a) { return () => { a |= 0; a = a + 0x6D2B79F5 | 0; let t = Math.imul(a ^ a >>> 15, 1 | a); t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t; return ((t ^ t >>> 14) >>> 0) / 4294967296; }; }

$('fo-suggest').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const tb = $('fo-suggest-table').tBodies[0];
  tb.replaceChildren();
  if (!count(fo.primary) || !count(fo.standby)) { const tr = el('tr'); tr.append(el('td', '', 'no latencies recorded for both stores yet')); tb.append(tr); return; }
  let cutoffs = $('fo-suggest-cutoffs').value.trim();
  cutoffs = cutoffs === 'auto' ? [0.5, 0.9, 0.95, 0.99].map((q) => quantile(fo.primary, q)) : cutoffs.split(/[ ,]+/).map((v) => Number(v) / 1000);
  if (!fo.policy) { const tr = el('tr'); tr.append(el('td', '', 'the hedge budget is read through FeedAdmin: enter the admin credential')); tb.append(tr); return; }
  const budget = fo.policy.budget || 0, burst = fo.policy.budgetBurst || 0;
  $('fo-suggest-note').textContent = 'budget ' + budget + ' (burst ' + burst + '), ' + count(fo.primary) + ' primary and ' + count(fo.standby) + ' standby reads recorded';
  const N = 20000;
  const rnd = mulberry32(1);
  const p = sampler(fo.primary, rnd), s = sampler(fo.standby, rnd);
  const draws = Array.from({ length: N }, () => [p(), s()]);
  const rows = [0, ...cutoffs.filter((c) => c > 0)];
  for (const cut of rows) {
    let tokens = burst, hedged = 0;
    const lat = draws.map(([a, b]) => {
      tokens = Math.min(burst, tokens + budget);
      if (cut > 0 && a > cut && tokens >= 1) { tokens -= 1; hedged++; return Math.min(a, cut + b); }
      return a;
    }).sort((x, y) => x - y);
    const q = (f) => lat[Math.min(N - 1, Math.floor(f * N))];
    const tr = el('tr');
    tr.append(el('td', '', cut ? fmtMs(cut) : 'never'), el('td', '', (100 * hedged / N).toFixed(1) + '%'),
      el('td', '', '+' + (100 * hedged / N).toFixed(1) + '%'), el('td', '', fmtMs(q(0.5))), el('td', '', fmtMs(q(0.99))), el('td', '', fmtMs(q(0.999))));
    tb.append(tr);
  }
});

// ---- queues ----
function queueTable(ms, tb) {
  const qs = [...new Set(ms.filter((m) => m.name === 'pinlater_queue_size').map((m) => m.labels.queue))].sort();
  tb.replaceChildren();
  for (const q of qs) {
    const tr = el('tr');
    tr.append(el('td', '', q));
    for (const st of ['pending', 'active', 'scheduled', 'retry', 'archived']) tr.append(el('td', '', String(sum(ms, 'pinlater_queue_size', { queue: q, state: st }))));
    tr.append(el('td', '', fmtMs(sum(ms, 'pinlater_queue_latency_seconds', { queue: q }))));
    tb.append(tr);
  }
}

const QUEUES = 'smartfeed.pinlater.v1.QueueAdmin/';
const qstate = { open: '' }; // the queue whose dead tasks are shown

// pollQueues reads QueueAdmin.ListQueues (admin credential) and draws a row per queue with its
// actions; every change is a QueueAdmin Set* call, which the admin port audits.
async function pollQueues() {
  let r;
  try { r = await rpc(QUEUES + 'ListQueues', {}, true); } catch (e) { showError('q-error', e); return; }
  showError('q-error');
  const tb = $('q-table').tBodies[0];
  tb.replaceChildren();
  for (const q of r.queues || []) {
    const tr = el('tr');
    tr.dataset.queue = q.name;
    const state = q.paused ? 'paused' : q.draining ? 'draining' : 'running';
    tr.append(el('td', '', q.name), el('td', 'q-state', state));
    for (const k of ['pending', 'active', 'scheduled', 'retry', 'dead']) tr.append(el('td', '', String(q[k] || 0)));
    tr.append(el('td', '', (q.processedToday || 0) + ' / ' + (q.failedToday || 0)), el('td', '', fmtMs((q.latencyMs || 0) / 1000)),
      el('td', '', q.rateLimit < 0 ? 'none' : q.rateLimit + '/s'));
    const act = el('td', 'q-actions');
    const button = (label, cls, fn) => { const b = el('button', cls, label); b.type = 'button'; b.addEventListener('click', fn); act.append(b); };
    button(q.paused ? 'resume' : 'pause', q.paused ? 'q-resume' : 'q-pause', () => change('SetQueuePaused', { queue: q.name, paused: !q.paused }));
    button(q.draining ? 'stop draining' : 'drain', 'q-drain', () => change('SetQueueDraining', { queue: q.name, draining: !q.draining }));
    button('rate…', 'q-rate', () => {
      const v = prompt('jobs per second for ' + q.name + ' (0 pauses, "none" removes the limit)', q.rateLimit < 0 ? 'none' : q.rateLimit);
      if (v === null) return;
      change('SetQueueRate', { queue: q.name, perSecond: v.trim() === 'none' ? -1 : Number(v) });
    });
    button('dead (' + (q.dead || 0) + ')', 'q-dead', () => { qstate.open = q.name; deadTasks(); });
    tr.append(act);
    tb.append(tr);
  }
  if (qstate.open) deadTasks();
}

async function change(method, body) {
  try {
    await rpc(QUEUES + method, body, true);
    $('q-status').textContent = method + ' ' + body.queue + ': done at ' + new Date().toLocaleTimeString();
  } catch (e) { $('q-status').textContent = method + ' ' + body.queue + ' refused: ' + e.message; }
  pollQueues();
}

async function deadTasks() {
  const q = qstate.open;
  const box = $('q-tasks');
  let r;
  try { r = await rpc(QUEUES + 'ListTasks', { queue: q, state: 'dead', pageSize: 50 }, true); } catch (e) { box.textContent = e.message; return; }
  const t = el('table', 'tbl');
  t.innerHTML = '<thead><tr><th>dead task</th><th>type</th><th>attempts</th><th>last error</th><th>failed</th><th>payload</th><th></th></tr></thead>';
  const tb = el('tbody');
  for (const k of r.tasks || []) {
    const tr = el('tr');
    tr.append(el('td', '', k.id), el('td', '', k.type), el('td', '', String(k.attempts || 0)), el('td', '', k.lastError || ''),
      el('td', '', k.lastFailedMs ? new Date(Number(k.lastFailedMs)).toLocaleString() : ''), el('td', 'payload', k.payload || ''));
    const td = el('td');
    const b = el('button', 'q-retry', 'retry');
    b.type = 'button';
    b.addEventListener('click', () => change('SetDeadRetried', { queue: q, id: k.id }));
    td.append(b);
    tr.append(td);
    tb.append(tr);
  }
  t.append(tb);
  const head = el('h2', '', 'Dead tasks of ' + q + ' (' + (r.tasks || []).length + ')');
  const all = el('button', 'q-retry-all', 'retry all');
  all.type = 'button';
  all.addEventListener('click', () => change('SetDeadRetried', { queue: q, all: true }));
  box.replaceChildren(head, all, t);
}

route();
