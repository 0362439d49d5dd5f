// The web console (GET /) in a real browser: headless Chromium driven by
// puppeteer-core against the real daemon (test-console.sh starts it with
// TLS and an API key).  Authenticates as a browser does (Basic, the key as
// the password), makes a session and sends a prompt through the UI, waits
// for streamed text in the live region and for the cache heatmap to
// redraw at a later step, walks the keyboard path to the send button, and
// fails on any console error or warning, page error or failed request.
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
         '--disable-extensions', '--window-size=1400,1000'],
  defaultViewport: { width: 1400, height: 1000 },
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

  // The prompt, then the keyboard path: Tab reaches Send, Enter sends.
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

  fs.mkdirSync(shotDir, { recursive: true });
  const shot = path.join(shotDir, 'console.png');
  await page.screenshot({ path: shot, fullPage: true });
  if (extraShot) fs.copyFileSync(shot, extraShot);
  check(`screenshot written (${extraShot || shot})`, fs.statSync(shot).size > 0);

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
