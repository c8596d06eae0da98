// The web app's own behaviour against a fake berth: the browser loads the real app from
// the daemon, and its API calls are answered by the test (Playwright routes), so each
// check controls exactly what arrives and when. Each returns a note for its PASS line.

import { until } from './api.mjs';
import { screen } from './checks.mjs';

function check(condition, why) {
  if (!condition) throw new Error(why);
}

const BOX = 'fake-box';
const NOW = '2026-01-01T00:00:00Z';

const boxView = (state = 'running') => ({
  id: 'bx_fake', name: BOX, template: 'echo', state, state_reason: null, created_at: NOW, last_activity_at: null,
  runtime: 'sandbox', limits: {}, pause_after_s: 0, snapshot_after_s: 0, stop_after_s: 0, auto_resume: true,
  labels: {}, env: {}, egress: {}, egress_source: 'template', disk_mib: 1024, disk_source: 'template', awake_because: [],
});

const sse = (events, retryMs) =>
  `retry: ${retryMs}\n\n` + events.map((e) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join('');

const event = (seq, type, data) => ({ seq, type, data, created_at: NOW });
const userEvent = (seq, text) => event(seq, 'user', { type: 'user', message: { role: 'user', content: text } });
const assistantEvent = (seq, text) => event(seq, 'assistant', { type: 'assistant', message: { content: [{ type: 'text', text }] } });
const piece = (seq, text) => event(seq, 'stream_event', { event: { type: 'content_block_delta', delta: { type: 'text_delta', text } } });

/**
 * A browser context whose API is the test's: a signed-in session, one box, its history
 * (`history`), and its event stream answered by `stream(call)` (call counts from 0); any
 * other API call is a 404. `requests` lists every API call the app made.
 */
async function fakeBerth(browser, phone, { history = [], stream = () => ({ body: sse([], 600_000) }), session } = {}) {
  // No service worker: every call of the page is the test's to answer.
  const context = await browser.newContext({ ...phone, serviceWorkers: 'block' });
  const requests = [];
  let streams = 0;
  await context.route('**/v1/**', async (route) => {
    const url = new URL(route.request().url());
    const path = url.pathname;
    requests.push(`${route.request().method()} ${path}${url.search}`);
    if (path === '/v1/web/session') {
      if (session) return session(route);
      return route.fulfill({ json: { id: 'ws_1', tenant: 'default', device: null, created_at: NOW } });
    }
    if (path === '/v1/boxes') return route.fulfill({ json: { boxes: [boxView()] } });
    if (path === '/v1/templates') return route.fulfill({ json: { templates: [] } });
    if (path === `/v1/boxes/${BOX}`) return route.fulfill({ json: boxView() });
    if (path === `/v1/boxes/${BOX}/files/stat`) return route.fulfill({ json: { name: 'user', kind: 'dir', size: 0, mode: 0o755, mtime: NOW } });
    if (path === `/v1/boxes/${BOX}/files/list`) return route.fulfill({ json: { entries: [] } });
    if (path === `/v1/boxes/${BOX}/events` && url.searchParams.get('wait') === 'false') {
      return route.fulfill({ json: { events: history, next_after: history.at(-1)?.seq ?? 0, more: false } });
    }
    if (path === `/v1/boxes/${BOX}/events`) {
      const { body, held } = stream(streams++);
      if (held) await held;
      return route.fulfill({ status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-store' }, body });
    }
    return route.fulfill({ status: 404, json: { error: { code: 'not_found', message: `the test's berth has no ${path}` } } });
  });
  return { context, requests };
}

/** A promise and the function that settles it. */
function gate() {
  let open;
  const opened = new Promise((resolve) => { open = resolve; });
  return { opened, open };
}

/** The hash changes while the session is being checked: only the newest route's screen is
 * mounted, even when the older check answers last. */
export async function oneScreenPerNavigation(browser, base, phone) {
  const checks = [];
  const { context, requests } = await fakeBerth(browser, phone, {
    session: (route) => {
      const held = gate();
      checks.push(held);
      return held.opened.then(() => route.fulfill({ json: { id: 'ws_1', tenant: 'default', device: null, created_at: NOW } }));
    },
  });
  try {
    const page = await context.newPage();
    await page.goto(`${base}/#/boxes`);
    await until('the first session check', 15_000, async () => checks.length === 1);
    await page.evaluate((box) => { location.hash = `#/boxes/${box}/files`; }, BOX);
    await until('the second session check', 15_000, async () => checks.length === 2);
    // The newer check answers first, then the older one.
    checks[1].open();
    await page.getByRole('heading', { name: BOX }).waitFor();
    checks[0].open();
    await until('the files list asked for', 15_000, async () => requests.some((r) => r.includes('/files/list')));
    // Let the older render run to its end: the app's next frame comes after it.
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const screens = await page.locator('main .page-head, main .box-head').count();
    check(screens === 1, `${screens} screens are mounted in main`);
    check(await page.getByRole('heading', { name: BOX }).isVisible(), 'the box screen is not the one shown');
    check(!requests.includes('GET /v1/boxes'), `the overtaken boxes screen was mounted too (it listed the boxes): ${requests.join(', ')}`);
    return 'the older check answered last and mounted nothing';
  } finally {
    await context.close();
  }
}

/** A streamed answer: the paragraph that is done is rendered once and kept, only the one
 * being written is rendered again; the conversation is aria-busy until the answer ends. */
export async function streamedAnswerRendersOnlyTheTail(browser, base, phone) {
  const finish = gate();
  const pieces = ['First paragraph, ', 'done.\n\n', 'Second ', 'paragraph ', 'still ', 'growing.'];
  const full = pieces.join('');
  const { context } = await fakeBerth(browser, phone, {
    history: [userEvent(1, 'tell me')],
    stream: (call) =>
      call === 0
        ? { body: sse(pieces.map((text, i) => piece(2 + i, text)), 50) }
        : { body: sse([assistantEvent(20, full), event(21, 'result', { subtype: 'success', result: full })], 600_000), held: finish.opened },
  });
  try {
    const page = await context.newPage();
    await page.addInitScript(() => {
      // Counts every time a node holding the first paragraph is put in the answer.
      window.__firstParagraph = { added: 0 };
      const holds = (n) => n.nodeType === 1 && n.textContent.includes('First paragraph');
      new MutationObserver((records) => {
        for (const r of records) {
          // Inside the answer (the answer's own arrival in the conversation is not a render).
          if (!r.target.closest?.('.streaming')) continue;
          window.__firstParagraph.added += [...r.addedNodes].filter(holds).length;
        }
      }).observe(document, { childList: true, subtree: true });
    });
    await page.goto(`${base}/#/boxes/${BOX}/chat`);
    const log = page.getByRole('log', { name: 'Conversation' });
    const streaming = log.locator('.streaming');
    await until('the streamed answer so far', 15_000, async () => (await streaming.innerText().catch(() => '')).includes('still growing.'));
    check((await log.getAttribute('aria-busy')) === 'true', 'the conversation is not aria-busy while the answer streams');
    // Once while it was written, once when it was done: not again for each later piece.
    const { added } = await page.evaluate(() => window.__firstParagraph);
    check(added <= 2, `the first paragraph was rendered ${added} times for ${pieces.length} pieces`);
    check((await streaming.locator('.md').count()) === 2, 'the answer is not one block per paragraph while it streams');
    finish.open();
    await until('the complete answer', 15_000, async () => (await log.locator('.streaming').count()) === 0);
    check((await log.getAttribute('aria-busy')) === null, 'the conversation is still aria-busy after the answer');
    const text = await log.locator('.msg.assistant').last().innerText();
    check(text.includes('First paragraph, done.') && text.includes('Second paragraph still growing.'), `the answer reads ${JSON.stringify(text)}`);
    return `${pieces.length} pieces; the first paragraph rendered ${added} times`;
  } finally {
    await context.close();
  }
}

/** A long history: only its newest rows are in the DOM; "Show earlier messages" pages back
 * to the first. */
export async function longHistoryIsPaged(browser, base, phone, shots) {
  const TURNS = 400;
  const history = [];
  for (let i = 1; i <= TURNS; i++) history.push(userEvent(2 * i - 1, `question ${i}`), assistantEvent(2 * i, `answer ${i}`));
  const { context } = await fakeBerth(browser, phone, { history });
  try {
    const page = await context.newPage();
    await page.goto(`${base}/#/boxes/${BOX}/chat`);
    const log = page.getByRole('log', { name: 'Conversation' });
    await log.getByText(`answer ${TURNS}`, { exact: true }).waitFor();
    const rows = await log.locator('[data-seq]').count();
    check(rows <= 200, `${rows} of ${2 * TURNS} rows are in the DOM`);
    check((await log.getByText('question 1', { exact: true }).count()) === 0, 'the first message is in the DOM already');
    const earlier = page.getByRole('button', { name: 'Show earlier messages' });
    await earlier.scrollIntoViewIfNeeded();
    const problems = await screen(page, shots, 'history-paged');
    check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
    let pages = 0;
    while (await earlier.isVisible()) {
      await earlier.click();
      pages += 1;
      check(pages <= 10, 'Show earlier messages never reaches the first message');
    }
    await log.getByText('question 1', { exact: true }).waitFor();
    const seqs = await log.locator('[data-seq]').evaluateAll((els) => els.map((e) => Number(e.dataset.seq)));
    check(seqs.every((s, i) => i === 0 || s > seqs[i - 1]), 'the rows shown earlier are out of order');
    return `${rows} rows in the DOM for ${2 * TURNS}; ${pages} pages back to the first`;
  } finally {
    await context.close();
  }
}

/** The tabs take the arrow keys (focus stays on the tab chosen); a navigation moves the
 * focus to the new screen's heading. */
export async function tabsAndFocus(browser, base, phone) {
  const { context } = await fakeBerth(browser, phone);
  try {
    const page = await context.newPage();
    await page.goto(`${base}/#/boxes/${BOX}/chat`);
    const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent);
    await page.getByRole('tab', { name: 'Chat' }).focus();
    await page.keyboard.press('ArrowRight');
    await page.waitForURL(/\/files$/);
    await until('the Files tab focused', 5000, async () => (await focused()) === 'tab-files');
    check((await page.getByRole('tab', { name: 'Files' }).getAttribute('aria-selected')) === 'true', 'Files is not the selected tab');
    await page.keyboard.press('ArrowLeft');
    await page.waitForURL(/\/chat$/);
    await until('the Chat tab focused', 5000, async () => (await focused()) === 'tab-chat');
    const tabStops = await page.getByRole('tab').evaluateAll((tabs) => tabs.map((t) => t.tabIndex));
    // One tab stop, the selected tab (Chat, the first), however many tabs there are.
    check(tabStops.length > 1 && JSON.stringify(tabStops) === JSON.stringify([0, ...Array(tabStops.length - 1).fill(-1)]), `tab stops ${tabStops}: only the selected tab is one`);
    await page.getByRole('link', { name: 'All boxes' }).click();
    await until('the Boxes heading focused', 5000, async () => (await focused()) === 'Boxes');
    return 'arrows move between tabs; the heading takes the focus after a navigation';
  } finally {
    await context.close();
  }
}
