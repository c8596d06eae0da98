// The longer scenarios of tests/app.spec.mjs: offline and back, inert markup, the app shell's size.

import zlib from 'node:zlib';

import { eventText, until } from './api.mjs';

function check(condition, why) {
  if (!condition) throw new Error(why);
}

const squash = (text) => text.replace(/\s+/g, ' ').trim();

function occurrences(haystack, needle) {
  let n = 0;
  for (let at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) n += 1;
  return n;
}

/**
 * b. The network drops in the middle of a streamed answer and a message is typed while it
 * is down; once it is back the conversation holds every event's text exactly as often as
 * the API's event list does, and the offline message was delivered once.
 */
export async function offlineScenario({ page, context, admin, appConsole, createBox, openChat, send, shows, log, boxesMade }) {
  const BOX = 'offline-e2e';
  const OFFLINE_TEXT = 'typed while offline 7c1';
  const dialog = await createBox(page, BOX);
  await dialog.getByRole('button', { name: 'Create' }).click();
  await dialog.waitFor({ state: 'detached' });
  await openChat(page, BOX);
  await send(page, 'stream 20');
  await shows(page, 'chunk 003 of 020.');

  // Going offline fails the app's requests, and chromium logs each failure as a console
  // error: those are the test's doing, while it is offline and until the app is back.
  const allow = appConsole.expect((text) => /ERR_INTERNET_DISCONNECTED|ERR_NETWORK_CHANGED|ERR_NETWORK_IO_SUSPENDED/.test(text), 'offline on purpose');
  await context.setOffline(true);
  try {
    await send(page, OFFLINE_TEXT);
    // Once the app says it waits for the network, it waits in the browser (IndexedDB), not
    // in the page: it is still there after a reload while offline (the service worker serves
    // the app's shell).
    await log(page).locator('.msg.user.queued', { hasText: OFFLINE_TEXT }).waitFor();
    await page.reload();
    await shows(page, OFFLINE_TEXT, 30_000);
    const done = await until('the streamed answer ends (API)', 60_000, async () =>
      (await admin.events(BOX)).find((e) => e.type === 'result' && String(e.data?.result ?? '').includes('chunk 020 of 020')));
    check(done, 'no result');
    const shown = await log(page).innerText();
    check(!shown.includes('chunk 020 of 020'), 'the whole answer reached the page while it was offline: the stream was never cut, so resuming was not tested');
    const early = (await admin.messages(BOX)).filter((m) => m.content === OFFLINE_TEXT);
    check(early.length === 0, `the message typed offline reached the daemon while offline: ${JSON.stringify(early)}`);
  } finally {
    await context.setOffline(false);
  }
  await shows(page, 'chunk 020 of 020.');
  await shows(page, `echo: ${OFFLINE_TEXT}`);
  allow();

  const delivered = await until('the offline message delivered', 30_000, async () => {
    const hits = (await admin.messages(BOX)).filter((m) => m.content === OFFLINE_TEXT);
    return hits.length > 0 && hits.every((m) => m.state === 'delivered') && hits;
  });
  check(delivered.length === 1, `the offline message is stored ${delivered.length} times`);
  const events = await admin.events(BOX);
  check(events.filter((e) => e.type === 'user' && eventText(e) === OFFLINE_TEXT).length === 1, 'the harness saw the offline message more than once');

  // Each text as often as the events hold it: nothing missing, nothing doubled.
  const texts = events.map(eventText).filter((t) => t && t.trim()).map(squash);
  const all = texts.join('\u0000');
  const shown = squash(await log(page).innerText());
  const wrong = [...new Set(texts)]
    .map((t) => ({ t, want: occurrences(all, t), got: occurrences(shown, t) }))
    .filter((c) => c.want !== c.got);
  check(wrong.length === 0, `the conversation differs from GET /v1/boxes/${BOX}/events: ${wrong.map((c) => `${JSON.stringify(c.t)} shown ${c.got}× for ${c.want}×`).join('; ')}`);
  const seqs = await log(page).locator('[data-seq]').evaluateAll((els) => els.map((e) => Number(e.dataset.seq)));
  check(new Set(seqs).size === seqs.length, `rows repeat an event: data-seq ${seqs.join(',')}`);
  await admin.remove(BOX);
  boxesMade.delete(BOX);
  return `${texts.length} event texts, each shown as often as stored; the offline message delivered once`;
}

/** d. An answer carrying script, an onerror image and a javascript: link runs nothing. */
export async function renderCheck(page, { send, shows, log }) {
  const payload = 'xss-probe <script>window.__berthXss = "script"</script> <img src=x onerror="window.__berthXss = \'img\'"> [tap me](javascript:window.__berthXss=\'link\') <a href="javascript:window.__berthXss=\'a\'">raw</a>';
  await send(page, payload);
  await shows(page, 'echo: xss-probe');
  const links = log(page).getByRole('link', { name: /tap me|raw/ });
  for (const link of await links.all()) await link.click({ timeout: 2000 }).catch(() => {});
  const found = await page.evaluate(() => ({
    flag: window.__berthXss ?? null,
    onerror: document.querySelectorAll('img[onerror]').length,
    scripts: [...document.querySelectorAll('[role=log] script')].length,
    js: [...document.querySelectorAll('a[href], [src], [action], [formaction]')]
      .map((e) => e.getAttribute('href') ?? e.getAttribute('src') ?? e.getAttribute('action') ?? e.getAttribute('formaction'))
      .filter((u) => /^\s*javascript:/i.test(u)),
  }));
  check(found.flag === null, `the payload ran: window.__berthXss = ${found.flag}`);
  check(found.onerror === 0, `${found.onerror} img with an onerror attribute in the DOM`);
  check(found.scripts === 0, 'a script element in the conversation');
  check(found.js.length === 0, `javascript: URLs in the DOM: ${found.js.join(', ')}`);
  return 'no script ran, no onerror, no javascript: URL';
}

/**
 * The gzipped size of the app shell: index.html, what it loads (scripts, styles, preloads)
 * and the modules those scripts import statically (not the `import()`ed ones, loaded on
 * demand).
 */
export async function shellSize(base) {
  const index = await (await fetch(`${base}/`)).text();
  const queue = [...index.matchAll(/<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"[^>]*>/g)]
    .filter((m) => /<script|rel="(?:stylesheet|modulepreload|preload)"/.test(m[0]))
    .map((m) => new URL(m[1], `${base}/`).href);
  const parts = [{ path: '/', gz: zlib.gzipSync(index, { level: 9 }).length }];
  const seen = new Set(queue);
  while (queue.length) {
    const url = queue.shift();
    const body = Buffer.from(await (await fetch(url)).arrayBuffer());
    parts.push({ path: new URL(url).pathname, gz: zlib.gzipSync(body, { level: 9 }).length });
    if (!url.endsWith('.js')) continue;
    for (const m of body.toString('utf8').matchAll(/\b(?:from|import)\s*"(\.{1,2}\/[^"]+)"/g)) {
      const next = new URL(m[1], url).href;
      if (!seen.has(next)) queue.push(next), seen.add(next);
    }
  }
  return { total: parts.reduce((sum, p) => sum + p.gz, 0), parts };
}
