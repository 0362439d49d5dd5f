// sinkd console: the playground and the live view.  Everything here goes
// through the public API (same origin, so the browser re-sends the Basic
// credentials it was asked for on GET /); the page keeps no secret and
// writes nothing to the browser console: errors are shown on the page.
'use strict';

const $ = (id) => document.getElementById(id);

const LIVE_PERIOD_MS = 2000; // tables and gauges
const CACHE_PERIOD_MS = 500; // the heatmap while a reply streams
// Okabe-Ito, as in console.css (canvas pixels cannot read CSS variables cheaply).
const TIER_RGB = {
  sink: [0xd5, 0x5e, 0x00],
  anchor: [0xcc, 0x79, 0xa7],
  compressed: [0x00, 0x72, 0xb2],
  hot: [0x00, 0x9e, 0x73],
  shared: [0xe6, 0x9f, 0x00], // sinks read from a shared prefix
};
const UNKNOWN_RGB = [0x99, 0x99, 0x99];
// Brightness (a factor on the tier's colour) of the smallest non-zero mass
// in view: dim but plainly visible, the hue still told apart; the ramp in
// console.css starts here.  Zero mass is nearly black.
const SHADE_FLOOR = 0.38;
const SHADE_ZERO = 0.08;
// Masses below this show at the floor, so that one stray 1e-30 does not
// squash the rest of the scale.
const MASS_FLOOR_MIN = 1e-6;

const state = {
  busy: false,       // a request of the playground is running
  abort: null,       // its AbortController
  cacheTarget: null, // the id of the session whose cache the heatmap shows
  cacheInFlight: false,
  liveInFlight: false,
  pollTimer: null,
  selectedAt: 0,     // performance.now() of the last selection
};

// ---- API ------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The error object's message of a failed answer, else its status line.
async function apiFailure(res) {
  let msg = `${res.status} ${res.statusText}`;
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) msg = `${res.status}: ${j.error.message}`;
  } catch (_) {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, msg);
}

async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', headers: {}, credentials: 'same-origin' };
  if (opts.body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await apiFailure(res);
  return opts.text ? res.text() : res.json();
}

// ---- formatting -----------------------------------------------------------

function fmtBytes(n) {
  if (typeof n !== 'number' || !isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

const fmtNum = (v, digits = 0) =>
  typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : v === null || v === undefined ? '–' : String(v);

// Long ids keep their start and end (request ids share a "console-"
// prefix); the cell's title holds the whole id.
const shortId = (id) => (id && id.length > 14 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id || '–');

function randomId() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return 'console-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text; // a live region speaks only on change
}

// ---- playground -----------------------------------------------------------

function mode() {
  return document.querySelector('input[name="mode"]:checked').value;
}

function numberField(id) {
  const v = $(id).value.trim();
  if (v === '') return undefined;
  const n = Number(v);
  return isFinite(n) ? n : undefined;
}

function samplingFields(stream) {
  const f = { stream };
  for (const id of ['temperature', 'top_p', 'max_tokens']) {
    const v = numberField(id);
    if (v !== undefined) f[id] = v;
  }
  const stops = $('stop').value.split('|').filter((s) => s.length);
  if (stops.length) f.stop = stops.slice(0, 4);
  return f;
}

// What to POST where: a session append, a chat completion or a completion.
function buildRequest() {
  const stream = $('stream').checked;
  const prompt = $('prompt').value;
  const session = $('session').value;
  const gen = samplingFields(stream);
  if (session) {
    const body = { text: prompt, generate: gen };
    const revise = numberField('revise');
    if (revise) body.revise_last_tokens = revise;
    return { path: `/v1/sessions/${encodeURIComponent(session)}/append`, body, stream };
  }
  if (mode() === 'chat') {
    const messages = [];
    const system = $('system').value.trim();
    if (system) messages.push({ role: 'system', content: system });
    messages.push({ role: 'user', content: prompt });
    return { path: '/v1/chat/completions', body: { messages, ...gen }, stream };
  }
  return { path: '/v1/completions', body: { prompt, ...gen }, stream };
}

// The text of one chunk or whole object: chat (delta or message) or completion.
function choiceText(obj) {
  const c = obj && obj.choices && obj.choices[0];
  if (!c) return '';
  if (c.delta && typeof c.delta.content === 'string') return c.delta.content;
  if (c.message && typeof c.message.content === 'string') return c.message.content;
  return typeof c.text === 'string' ? c.text : '';
}

function finishReason(obj) {
  const c = obj && obj.choices && obj.choices[0];
  return c && c.finish_reason ? c.finish_reason : null;
}

// Reads "data: {json}\n\n" events until "data: [DONE]" (true) or the end
// of the body (false); comment lines (": keep-alive") are skipped.
async function readSSE(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += value;
    let m;
    while ((m = /\r?\n\r?\n/.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (!data) continue;
      if (data === '[DONE]') return true;
      onEvent(JSON.parse(data));
    }
  }
}

function outputAppend(text) {
  const out = $('output');
  out.append(document.createTextNode(text));
  out.scrollTop = out.scrollHeight;
}

function setBusy(busy) {
  state.busy = busy;
  $('send').disabled = busy;
  $('abort').disabled = !busy;
  $('gen-form').setAttribute('aria-busy', busy ? 'true' : 'false');
}

async function send() {
  if (state.busy) return;
  const req = buildRequest();
  const rid = randomId();
  setText('error', '');
  $('output').textContent = '';
  setText('status', 'Sending…');
  setBusy(true);
  state.abort = new AbortController();
  const session = $('session').value;
  let nTokens = 0;
  let finish = null;
  try {
    const res = await fetch(req.path, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-Request-Id': rid },
      body: JSON.stringify(req.body),
      signal: state.abort.signal,
    });
    if (!res.ok) throw await apiFailure(res);
    // The server took the revision: the next send appends without one.
    $('revise').value = '0';
    // The heatmap follows a session only: a one-off stream's cache is gone
    // (404) once it ends, which on a small model is before a poll reaches it.
    if (session) startCachePolling(session);
    if (req.stream) {
      setText('status', 'Streaming…');
      const done = await readSSE(res.body, (ev) => {
        if (ev.error) throw new ApiError(0, ev.error.message || 'stream error');
        const t = choiceText(ev);
        if (t) {
          nTokens++;
          outputAppend(t);
        }
        finish = finishReason(ev) || finish;
      });
      if (!done) throw new ApiError(0, 'the stream ended without [DONE]');
    } else {
      const obj = await res.json();
      outputAppend(choiceText(obj));
      finish = finishReason(obj);
      nTokens = obj.usage ? obj.usage.completion_tokens : nTokens;
    }
    const what = req.stream ? 'chunks' : 'tokens';
    setText('status', `Done: ${nTokens} ${what}${finish ? `, finish_reason ${finish}` : ''}.`);
  } catch (e) {
    if (e.name === 'AbortError') setText('status', 'Stopped.');
    else {
      setText('status', 'Failed.');
      setText('error', e.message || String(e));
    }
  } finally {
    setBusy(false);
    state.abort = null;
    stopCachePolling(!!session);
    refreshLive();
  }
}

// ---- sessions -------------------------------------------------------------

function fillSessionPicker(sessions) {
  const sel = $('session');
  const keep = sel.value;
  const ids = new Set(sessions.map((s) => s.id));
  if (keep && !ids.has(keep)) {
    sessions = sessions.concat([{ id: keep }]); // just made, not listed yet
  }
  while (sel.options.length > 1) sel.remove(1);
  for (const s of sessions) {
    const o = document.createElement('option');
    o.value = s.id;
    o.textContent = `${s.id}${typeof s.tokens_seen === 'number' ? ` (${s.tokens_seen} tokens)` : ''}`;
    sel.append(o);
  }
  sel.value = keep;
}

async function newSession() {
  setText('error', '');
  try {
    const s = await api('/v1/sessions', { method: 'POST', body: {} });
    const sel = $('session');
    const o = document.createElement('option');
    o.value = s.id;
    o.textContent = s.id;
    sel.append(o);
    sel.value = s.id;
    onSessionChange();
    setText('status', `Session ${s.id} created and selected.`);
    refreshLive();
  } catch (e) {
    setText('error', `New session: ${e.message}`);
  }
}

function onSessionChange() {
  const id = $('session').value;
  $('revise').disabled = !id;
  onModeChange();
  selectCache(id || null);
}

// An append (the session path) is plain text: the server applies no chat
// template and takes no messages, so the system message is not sent; the
// field stays in view, disabled, with a note that says so.
function onModeChange() {
  const session = !!$('session').value;
  $('system-wrap').hidden = !session && mode() !== 'chat';
  $('system').disabled = session;
  setText('system-note', session
    ? 'Not sent with a session: an append is plain text, with no chat template and no system message.'
    : 'Sent first in each chat request without a session.');
}

function onSamplingChange() {
  const parts = [];
  for (const [id, name] of [['temperature', 'temperature'], ['top_p', 'top_p']]) {
    const v = $(id).value.trim();
    parts.push(`${name} ${v === '' ? 'default' : v}`);
  }
  const stops = $('stop').value.split('|').filter((x) => x.length);
  if (stops.length) parts.push(`${stops.length} stop string${stops.length > 1 ? 's' : ''}`);
  setText('sampling-summary', parts.join(', '));
}

// ---- live view ------------------------------------------------------------

// Sum of a metric's series in Prometheus text (NaN when absent).
function metricValue(text, name) {
  let sum = NaN;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== ' ' && rest[0] !== '{') continue;
    const v = Number(rest.replace(/^\{[^}]*\}/, '').trim().split(/\s+/)[0]);
    if (isFinite(v)) sum = (isNaN(sum) ? 0 : sum) + v;
  }
  return sum;
}

function showGauges(text) {
  const budget = metricValue(text, 'sinkd_kv_bytes_budget');
  for (const which of ['reserved', 'resident']) {
    const v = metricValue(text, `sinkd_kv_bytes_${which}`);
    const frac = budget > 0 && isFinite(v) ? v / budget : 0;
    $(`kv-${which}`).value = Math.min(1, frac);
    setText(`kv-${which}-text`, `${fmtBytes(v)} of ${fmtBytes(budget)} (${(frac * 100).toFixed(1)}%)`);
  }
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
  return td;
}

function tierCells(tr, o) {
  const t = o.tiers || {};
  // a session whose sinks are a prefix other sessions share too
  const shared = o.shared_prefix_tokens > 0;
  const sink = cell(tr, fmtNum(t.sink) + (shared ? ' shared' : ''));
  if (shared) sink.title = `${fmtNum(o.shared_prefix_tokens)} tokens read from a shared prefix`;
  cell(tr, fmtNum(t.compressed));
  cell(tr, fmtNum(t.hot));
  cell(tr, fmtBytes(o.bytes_resident));
  cell(tr, fmtBytes(o.bytes_reserved));
}

function cacheButton(tr, id) {
  const td = document.createElement('td');
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = 'Show';
  b.dataset.session = id;
  b.setAttribute('aria-label', `Show the cache of session ${id}`);
  b.addEventListener('click', () => {
    $('session').value = id;
    onSessionChange();
  });
  td.append(b);
  tr.append(td);
}

// Rebuilds a table's body; a focused "Show" button keeps the focus (on its
// new copy), so that the 2 s refresh does not throw a keyboard user out.
function fillTable(id, rows, nCols, fill) {
  const tbody = $(id).tBodies[0];
  const focused = tbody.contains(document.activeElement) ? document.activeElement.dataset.session : null;
  tbody.textContent = '';
  if (!rows.length) {
    const tr = document.createElement('tr');
    cell(tr, 'none', 'empty').colSpan = nCols;
    tbody.append(tr);
    return;
  }
  for (const o of rows) {
    const tr = document.createElement('tr');
    fill(tr, o);
    tbody.append(tr);
  }
  if (focused) {
    const b = [...tbody.querySelectorAll('button')].find((x) => x.dataset.session === focused);
    if (b) b.focus();
  }
}

// asked: when the list was asked for; a selected session it lacks although
// it was selected before then has expired or was deleted.
function showSessions(list, asked) {
  const id = state.cacheTarget;
  if (id && !state.busy && asked > state.selectedAt && !list.some((s) => s.id === id)) {
    $('session').value = '';
    onSessionChange();
    setText('status', `Session ${id} is gone (expired or deleted).`);
  }
  setText('n-sessions', String(list.length));
  const target = state.cacheTarget;
  fillTable('sessions-table', list, 11, (tr, s) => {
    if (target === s.id) tr.className = 'selected';
    cell(tr, shortId(s.id), 'id').title = s.id;
    cell(tr, fmtNum(s.tokens_seen));
    cell(tr, fmtNum(s.tokens_resident));
    tierCells(tr, s);
    cell(tr, fmtNum(s.idle_s, 1));
    cell(tr, s.busy ? 'yes' : 'no');
    cacheButton(tr, s.id);
  });
  if (!state.busy) fillSessionPicker(list);
}

function showStreams(list) {
  setText('n-streams', String(list.length));
  fillTable('streams-table', list, 13, (tr, s) => {
    cell(tr, shortId(s.id), 'id').title = s.id;
    if (s.session_id) cell(tr, shortId(s.session_id), 'id').title = s.session_id;
    else cell(tr, '–');
    cell(tr, s.state || '–');
    cell(tr, fmtNum(s.prompt_tokens));
    cell(tr, fmtNum(s.generated_tokens));
    cell(tr, fmtNum(s.tokens_seen));
    cell(tr, fmtNum(s.tokens_resident));
    tierCells(tr, s);
    cell(tr, fmtNum(s.age_s, 1));
  });
}

async function refreshLive() {
  if (state.liveInFlight) return;
  state.liveInFlight = true;
  const problems = [];
  const part = async (what, fn) => {
    try {
      await fn();
    } catch (e) {
      problems.push(`${what}: ${e.message}`);
    }
  };
  await Promise.all([
    part('metrics', async () => showGauges(await api('/metrics', { text: true }))),
    part('sessions', async () => {
      const asked = performance.now();
      showSessions((await api('/v1/sessions')).data || [], asked);
    }),
    part('streams', async () => showStreams((await api('/v1/streams')).data || [])),
  ]);
  state.liveInFlight = false;
  setText('live-status', problems.length ? `Not refreshed: ${problems.join('; ')}` : 'Refreshed every 2 s.');
  // A selected session's cache changes only when it steps; the fast poll
  // runs while a reply streams.
  if (!state.pollTimer && state.cacheTarget) refreshCache();
}

// ---- heatmap --------------------------------------------------------------

const cachePath = (id) => `/v1/sessions/${encodeURIComponent(id)}/cache`;

function selectCache(id) {
  state.cacheTarget = id;
  state.selectedAt = performance.now();
  const canvas = $('heatmap');
  if (!id) {
    canvas.getContext('2d').clearRect(0, 0, canvas.width, canvas.height);
    delete canvas.dataset.step;
    canvas.setAttribute('aria-label', 'KV cache heatmap: no session selected');
    setText('mass-lo', 'min');
    setText('heatmap-title', 'Cache of the selected session: no session selected.');
    return;
  }
  refreshCache();
}

async function refreshCache() {
  const target = state.cacheTarget;
  if (!target || state.cacheInFlight) return;
  state.cacheInFlight = true;
  try {
    const c = await api(cachePath(target));
    if (state.cacheTarget === target) drawHeatmap(c, target);
  } catch (e) {
    setText('heatmap-title', `Cache of session ${target}: ${e.message}`);
  } finally {
    state.cacheInFlight = false;
  }
}

function startCachePolling(id) {
  stopCachePolling(false);
  state.cacheTarget = id;
  refreshCache();
  state.pollTimer = setInterval(refreshCache, CACHE_PERIOD_MS);
}

// After the reply the cache is read once more: its last step.
function stopCachePolling(again) {
  if (state.pollTimer) clearInterval(state.pollTimer);
  state.pollTimer = null;
  if (again) setTimeout(refreshCache, 50);
}

// Slots of a layer in stream order.
function slotOrder(layer) {
  const n = layer.n_slots || (layer.tier ? layer.tier.length : 0);
  const idx = Array.from({ length: n }, (_, i) => i);
  const si = layer.stream_index;
  if (Array.isArray(si)) idx.sort((a, b) => si[a] - si[b]);
  return idx;
}

function drawHeatmap(c, target) {
  const canvas = $('heatmap');
  const layers = Array.isArray(c.layers) ? c.layers : [];
  const names = Array.isArray(c.tier_names) ? c.tier_names : ['sink', 'anchor', 'compressed', 'hot', 'shared'];
  const nSlots = Math.max(1, ...layers.map((l) => l.n_slots || (l.tier ? l.tier.length : 0)));
  const left = 44, right = 10, top = 8, bottom = 36;
  const rowH = Math.max(3, Math.min(28, Math.floor(200 / Math.max(1, layers.length))));
  // Drawn at the size it is shown (CSS pixels times the device's), so that
  // the labels are not scaled down to a blur.
  const dpr = window.devicePixelRatio || 1;
  const cssW = Math.max(320, canvas.clientWidth || 960);
  const cssH = top + bottom + rowH * Math.max(1, layers.length);
  canvas.width = Math.round(cssW * dpr);
  canvas.height = Math.round(cssH * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const W = cssW - left - right;
  const cellW = W / nSlots;
  ctx.fillStyle = '#000';
  ctx.fillRect(0, 0, cssW, cssH);

  const traced = c.tracing === true;
  const scale = massScale(traced ? layers : []);
  const counts = {};
  layers.forEach((l, row) => {
    const y = top + row * rowH;
    slotOrder(l).forEach((slot, k) => {
      const name = names[l.tier ? l.tier[slot] : -1] || 'unknown';
      counts[name] = (counts[name] || 0) + 1;
      const rgb = TIER_RGB[name] || UNKNOWN_RGB;
      const v = scale.shade(traced && l.mass_max ? l.mass_max[slot] : null);
      ctx.fillStyle = `rgb(${Math.round(rgb[0] * v)},${Math.round(rgb[1] * v)},${Math.round(rgb[2] * v)})`;
      ctx.fillRect(left + k * cellW, y, Math.max(1, Math.ceil(cellW)), Math.max(1, rowH - 1));
    });
  });
  drawAxes(ctx, canvas, layers, { left, top, bottom, rowH, W });

  canvas.dataset.step = String(c.step);
  setText('mass-lo', scale.lo ? fmtMass(scale.lo) : 'min');
  const tiers = Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', ');
  const summary =
    `Cache of session ${target} at step ${c.step}, stream position ${c.stream_position}: ` +
    `${layers.length} layers, up to ${nSlots} slots; slots per tier over all layers: ${tiers || 'none'}; ` +
    (!traced ? 'attention tracing starts with the next step (full brightness until then).'
      : scale.lo ? `brightness shows attention mass, log scale from ${fmtMass(scale.lo)} to 1.`
        : 'no attention mass yet.');
  canvas.setAttribute('aria-label', summary);
  setText('heatmap-title', summary);
}

// Brightness of a mass: log scale from the smallest non-zero mass in view
// (SHADE_FLOOR) to 1 (full), zero SHADE_ZERO, unknown (not traced) full.
// Attention piles onto the sinks, so a linear or square-root scale leaves
// every other slot nearly black.  lo: the scale's low end (null: no mass
// in view).
function massScale(layers) {
  let lo = Infinity;
  for (const l of layers) for (const m of l.mass_max || []) if (m > 0 && m < lo) lo = m;
  lo = isFinite(lo) ? Math.min(Math.max(lo, MASS_FLOOR_MIN), 1) : null;
  const span = lo ? -Math.log(lo) : 0; // 0 when every mass is 1
  const shade = (m) => {
    if (m === null || m === undefined || !isFinite(m)) return 1;
    if (m <= 0) return SHADE_ZERO;
    if (span <= 0) return 1;
    const t = 1 - Math.log(Math.min(m, 1)) / -span;
    return SHADE_FLOOR + (1 - SHADE_FLOOR) * Math.min(1, Math.max(0, t));
  };
  return { lo, shade };
}

function fmtMass(m) {
  return m >= 0.01 ? m.toFixed(2) : m.toExponential(1).replace('e-', '·10⁻').replace(/\d+$/, (d) =>
    [...d].map((x) => '⁰¹²³⁴⁵⁶⁷⁸⁹'[x]).join(''));
}

function drawAxes(ctx, canvas, layers, g) {
  ctx.fillStyle = '#ddd';
  ctx.font = '12px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  const every = Math.ceil(14 / g.rowH); // label rows no closer than 14 px
  layers.forEach((l, row) => {
    if (row % every === 0) ctx.fillText(String(l.layer ?? row), g.left - 6, g.top + row * g.rowH + g.rowH / 2);
  });
  ctx.save();
  ctx.translate(14, g.top + (layers.length * g.rowH) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = 'center';
  ctx.fillText('layer', 0, 0);
  ctx.restore();
  const yAxis = g.top + layers.length * g.rowH;
  ctx.textBaseline = 'top';
  const first = layers[0];
  if (first && Array.isArray(first.stream_index) && first.stream_index.length) {
    const order = slotOrder(first).map((i) => first.stream_index[i]);
    ctx.textAlign = 'left';
    ctx.fillText(`pos ${order[0]}`, g.left, yAxis + 4);
    ctx.textAlign = 'right';
    ctx.fillText(`pos ${order[order.length - 1]}`, g.left + g.W, yAxis + 4);
  }
  ctx.textAlign = 'center';
  ctx.fillText('slot, in stream order →', g.left + g.W / 2, yAxis + 20);
}

// ---- start ----------------------------------------------------------------

function init() {
  $('gen-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    send();
  });
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      $('gen-form').requestSubmit();
    }
  });
  $('abort').addEventListener('click', () => state.abort && state.abort.abort());
  $('new-session').addEventListener('click', newSession);
  $('refresh-sessions').addEventListener('click', refreshLive);
  $('session').addEventListener('change', onSessionChange);
  for (const r of document.querySelectorAll('input[name="mode"]')) r.addEventListener('change', onModeChange);
  for (const id of ['temperature', 'top_p', 'stop']) $(id).addEventListener('input', onSamplingChange);
  onSamplingChange();
  onModeChange();
  api('/v1/models')
    .then((m) => setText('model-name', (m.data && m.data[0] && m.data[0].id) || '?'))
    .catch((e) => setText('model-name', `unknown (${e.message})`));
  refreshLive();
  setInterval(refreshLive, LIVE_PERIOD_MS);
}

init();
