// The web console (GET /) in a real browser: headless Chromium driven by
// puppeteer-core against the real daemon (test-console.sh starts it with
// TLS and an API key).  Authenticates as a browser does (Basic, the key as
// the password), makes a session and sends a prompt through the UI, waits
// for streamed text in the live region and for the cache heatmap to
// redraw at a later step, walks the keyboard path to the send button, and
// fails on any console error or warning, page error or failed request.
// At a 1,366x768 laptop viewport: the output box is in view without
// scrolling once a reply streamed in, the page never scrolls sideways (a
// long streams row included), the heatmap has its legend and a visible
// floor, "revise last N" is back to 0 after a send, and with a session the
// system message says that it is not sent.
//
// env: SINKD_BASE_URL (https://127.0.0.1:PORT), SINKD_API_KEY, CHROMIUM
// (default /usr/bin/chromium), SHOT_DIR (the screenshot's folder) and
// CONSOLE_SCREENSHOT (a further path for it, optional).
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const base = process.env.SINKD_BASE_URL;
const key = process.env.SINKD_API_KEY;
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const shotDir = process.env.SHOT_DIR || '.';
const extraShot = process.env.CONSOLE_SCREENSHOT || '';
if (!base || !key) {
  console.log('not ok - SINKD_BASE_URL and SINKD_API_KEY are required');
  process.exit(1);
}

let failures = 0;
function check(what, ok, detail) {
  console.log(`${ok ? 'ok' : 'not ok'} - ${what}`);
  if (!ok) {
    failures++;
    if (detail !== undefined) console.log(`   got: ${String(detail).slice(0, 600)}`);
  }
  return ok;
}

// Waits for fn (run in the page) to return something truthy; null on timeout.
async function waitFor(page, fn, arg, timeout) {
  try {
    const h = await page.waitForFunction(fn, { timeout, polling: 50 }, arg);
    return await h.jsonValue();
  } catch (_) {
    return null;
  }
}

const problems = []; // console errors/warnings, page errors, failed requests
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  acceptInsecureCerts: true, // the test's self-signed certificate
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run',
         '--disable-extensions', '--window-size=1366,768'],
  defaultViewport: { width: 1366, height: 768 },
});
try {
  const page = await browser.newPage();
  page.on('console', (m) => {
    if (['error', 'warn', 'warning', 'assert'].includes(m.type()))
      problems.push(`console ${m.type()}: ${m.text()} (${(m.location() || {}).url || ''})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message || e}`));
  page.on('requestfailed', (r) =>
    problems.push(`request failed: ${r.method()} ${r.url()}: ${(r.failure() || {}).errorText}`));
  page.on('response', (r) => {
    // The first 401 of each request is the challenge the browser answers.
    if (r.status() >= 400 && r.status() !== 401)
      problems.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`);
  });
  await page.authenticate({ username: 'sinkd', password: key });

  const res = await page.goto(`${base}/`, { waitUntil: 'load', timeout: 15000 });
  check('GET / with Basic credentials is 200', res && res.status() === 200, res && res.status());
  const csp = (res && res.headers()['content-security-policy']) || '';
  check("the page's CSP forbids inline script", /script-src 'self'/.test(csp) && !/unsafe-inline/.test(csp), csp);
  check('the page has its landmarks and a live output region',
    await page.evaluate(() =>
      !!document.querySelector('main') && !!document.querySelector('header') &&
      document.getElementById('output').getAttribute('aria-live') === 'polite'));
  check('every control has a label',
    (await page.evaluate(() =>
      [...document.querySelectorAll('input, select, textarea, button')]
        .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') &&
                       !(e.tagName === 'BUTTON' && e.textContent.trim()))
        .map((e) => e.id || e.outerHTML))).length === 0);
  const model = await waitFor(page, () => {
    const t = document.getElementById('model-name').textContent;
    return t !== '…' && t;
  }, null, 10000);
  check('the model name is shown', model === 'stories260K', model);

  // A session, made through the UI.
  await page.click('#new-session');
  const session = await waitFor(page, () => document.getElementById('session').value, null, 10000);
  check('"New session" creates and selects a session', /^[0-9a-f]+$/.test(session || ''), session);
  const step0 = await waitFor(page, () => document.getElementById('heatmap').dataset.step, null, 10000);
  check('the heatmap draws the new session\'s cache (data-step)', step0 !== null, step0);
  const listed = await waitFor(page, (id) =>
    [...document.querySelectorAll('#sessions-table td')].some((td) => td.title === id), session, 10000);
  check('the session is listed in the sessions table', !!listed);
  await page.focus('#sessions-table button');
  await new Promise((r) => setTimeout(r, 2300)); // past one refresh of the table
  const kept = await page.evaluate(() => document.activeElement.dataset.session || null);
  check("a focused \"Show\" button keeps the focus through the table's refresh", kept === session, kept);

  // The prompt, then the keyboard path: Tab reaches Send, Enter sends;
  // from the top of the page (focusing the table scrolled down to it), as
  // a user who has not scrolled.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.$eval('#prompt', (e) => { e.value = ''; });
  await page.type('#prompt', 'Once upon a time');
  await page.$eval('#max_tokens', (e) => { e.value = ''; });
  await page.type('#max_tokens', '48');
  await page.focus('#prompt');
  let tabs = 0;
  while (tabs < 20 && (await page.evaluate(() => document.activeElement.id)) !== 'send') {
    await page.keyboard.press('Tab');
    tabs++;
  }
  const onSend = await page.evaluate(() => document.activeElement.id === 'send');
  check(`Tab reaches the send button (${tabs} presses from the prompt)`, onSend);
  const focusRing = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
  check('the focused button shows a focus outline', focusRing && focusRing !== 'none', focusRing);
  await page.keyboard.press('Enter');

  const text = await waitFor(page, () => document.getElementById('output').textContent.trim(), null, 20000);
  check('streamed text appears in the output region', !!text, text);
  const done = await waitFor(page, () => /^Done/.test(document.getElementById('status').textContent) &&
    document.getElementById('status').textContent, null, 20000);
  check('the reply ends ("Done")', !!done,
    await page.evaluate(() => document.getElementById('status').textContent + ' / ' +
                              document.getElementById('error').textContent));
  const fold = await page.evaluate(() => {
    const r = document.getElementById('output').getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, left: r.left, right: r.right, h: r.height,
             vw: window.innerWidth, vh: window.innerHeight, scrollY: window.scrollY };
  });
  check('at 1366x768 the output box is in view without scrolling',
    fold.scrollY === 0 && fold.top >= 0 && fold.left >= 0 && fold.bottom <= fold.vh &&
      fold.right <= fold.vw && fold.h >= 100, JSON.stringify(fold));
  const step1 = await waitFor(page, (s) => {
    const v = document.getElementById('heatmap').dataset.step;
    return v !== undefined && v !== s && v;
  }, step0, 10000);
  check('the heatmap redraws at a later step', step1 !== null && Number(step1) > Number(step0),
    `${step0} -> ${step1}`);
  const gauge = await page.evaluate(() => document.getElementById('kv-reserved-text').textContent);
  check('the KV gauge shows the budget', /of [0-9.]+ [KMGT]?i?B/.test(gauge), gauge);
  const label = await page.evaluate(() => document.getElementById('heatmap').getAttribute('aria-label'));
  check('the heatmap has a text summary', /step \d+/.test(label || ''), label);
  const legend = await page.evaluate(() => {
    const l = document.getElementById('heatmap-legend');
    return l && l.offsetParent !== null ? l.textContent.replace(/\s+/g, ' ') : '';
  });
  check('the heatmap legend names the tiers and the brightness scale',
    ['sink', 'anchor', 'compressed', 'hot', 'shared', 'attention mass', 'log scale'].every((w) => legend.includes(w)),
    legend);
  const lo = await waitFor(page, () => {
    const t = document.getElementById('mass-lo').textContent;
    return t !== 'min' && t;
  }, null, 10000);
  check("the legend shows the scale's low end once the masses are traced", !!lo, lo);
  // The shade of a mass: the smallest non-zero one clearly visible, zero dark.
  const shades = await page.evaluate(() => {
    const s = massScale([{ mass_max: [0, 1e-5, 0.01, 1] }]);
    return [0, 1e-5, 0.01, 1].map((m) => s.shade(m));
  });
  check('the heatmap is on a log scale with a visible floor (0, 1e-5, 0.01, 1)',
    shades[0] < 0.15 && shades[1] >= 0.3 && shades[1] < shades[2] && shades[2] < shades[3] &&
      shades[3] === 1 && Math.abs(shades[2] - (shades[1] + shades[3]) / 2) < 0.1, shades.join(', '));
  const sys = await page.evaluate(() => ({
    disabled: document.getElementById('system').disabled,
    shown: document.getElementById('system-wrap').offsetParent !== null,
    note: document.getElementById('system-note').textContent,
  }));
  check('with a session the system message is shown as not sent',
    sys.shown && sys.disabled && /not sent with a session/i.test(sys.note), JSON.stringify(sys));

  fs.mkdirSync(shotDir, { recursive: true });
  const shot = path.join(shotDir, 'console.png');
  await page.screenshot({ path: shot, fullPage: true });
  if (extraShot) fs.copyFileSync(shot, extraShot);
  check(`screenshot written (${extraShot || shot})`, fs.statSync(shot).size > 0);

  // A long streams row (ids of 64 characters, large counts) drawn in the
  // table: it fits its box under both columns, and the page does not scroll
  // sideways.  The next refresh (2 s) puts the real rows back.
  const wide = await page.evaluate(() => {
    const big = { sink: 4096, compressed: 123456, hot: 65536 };
    showStreams([{ id: 'chatcmpl-' + 'f'.repeat(55), session_id: 'a'.repeat(32), state: 'decoding',
                   prompt_tokens: 1234567, generated_tokens: 7654321, tokens_seen: 8888888,
                   tokens_resident: 193088, tiers: big, bytes_resident: 123.4 * 2 ** 30,
                   bytes_reserved: 999.9 * 2 ** 30, age_s: 86399.9 }]);
    const wrap = document.getElementById('streams-table').parentElement;
    const id = document.querySelector('#streams-table td');
    return { body: [document.body.scrollWidth, document.body.clientWidth],
             doc: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
             wrap: [wrap.scrollWidth, wrap.clientWidth], idText: id.textContent, idTitle: id.title };
  });
  check('a long streams row does not widen the page',
    wide.body[0] <= wide.body[1] && wide.doc[0] <= wide.doc[1], JSON.stringify(wide));
  check('... and fits its own box (no sideways scroll there either)', wide.wrap[0] <= wide.wrap[1],
    JSON.stringify(wide));
  check('... its id shortened, the whole id in the title',
    wide.idText.length < 20 && wide.idTitle.length === 64, JSON.stringify(wide));

  // The session again, its last 3 tokens revised first; then a one-off
  // streamed completion (no session).
  const reply = async (what) => {
    await page.click('#send');
    const ok = await waitFor(page, () => /^Done/.test(document.getElementById('status').textContent) &&
      document.getElementById('output').textContent.trim(), null, 20000);
    check(what, !!ok, await page.evaluate(() => document.getElementById('status').textContent + ' / ' +
                                          document.getElementById('error').textContent));
  };
  await page.$eval('#revise', (e) => { e.value = ''; });
  await page.type('#revise', '3');
  await reply('an append that revises the last 3 tokens streams a reply');
  const revise = await page.$eval('#revise', (e) => e.value);
  check('"revise last N" is back to 0 after the send', revise === '0', revise);
  await page.select('#session', '');
  await page.click('input[name="mode"][value="completion"]');
  check('without a session, "revise" is disabled', await page.$eval('#revise', (e) => e.disabled));
  await reply('a one-off streamed completion');
} catch (e) {
  check('the browser run', false, e.stack || e);
} finally {
  await browser.close();
}
check('no console error or warning, page error or failed request', problems.length === 0,
  problems.join('\n   '));
process.exit(failures ? 1 : 0);
