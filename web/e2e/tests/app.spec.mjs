// berth's web app end to end, in order: a real daemon with real sandbox boxes, Debian's
// chromium as a 390×844 phone. The tests run one after the other on one box; each checks
// its own screens (axe-core: no serious or critical violation) and console (no error).
import os from 'node:os';
import { execFileSync } from 'node:child_process';

import { test } from '@playwright/test';

import { api, until } from '../lib/api.mjs';
import { createBox as newBoxDialog, holdMessagePosts, log, openChat, send, shows } from '../lib/app.mjs';
import { watchConsole, screen } from '../lib/checks.mjs';
import { ADMIN, BASE, check, need, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';
import { startPushService } from '../lib/push-service.mjs';
import { offlineScenario, renderCheck, shellSize } from '../lib/scenarios.mjs';

test.describe.configure({ mode: 'serial' });

const admin = api(BASE, ADMIN);
const CHAT = 'chat-e2e';
const boxesMade = new Set();
const createBox = (page, name) => newBoxDialog(page, name, boxesMade);
const consoles = [];
let push;
let context;
let appConsole;
let page;

async function shoot(p, name) {
  const problems = await screen(p, SHOTS, name);
  check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
}

test.beforeAll(async ({ browser }) => {
  push = await startPushService(Number(need('BERTH_PUSH_PORT')));
  context = await browser.newContext(phone);
  appConsole = watchConsole(context);
  consoles.push(appConsole);
  appConsole.expect(signedOutProbe, 'the signed-out session probe');
  await context.grantPermissions(['notifications'], { origin: BASE });
  page = await context.newPage();
});

test.afterEach(() => {
  const errors = consoles.flatMap((c) => c.errors.splice(0));
  check(errors.length === 0, `console errors:\n  ${errors.join('\n  ')}`);
});

test.afterAll(async () => {
  for (const name of boxesMade) await admin.remove(name).catch(() => {});
  await context?.close();
  await push?.close();
});

test('first render from a cold cache under 1 s (more under load); sign in with an API key', async ({ browser }) => {
  // A new context has an empty HTTP cache and no service worker.
  const cold = await browser.newContext(phone);
  const coldConsole = watchConsole(cold);
  consoles.push(coldConsole);
  coldConsole.expect(signedOutProbe, 'the signed-out session probe');
  await cold.addInitScript(() => {
    new MutationObserver((_, observer) => {
      if (document.querySelector('input, button')) {
        window.__berthFirstUi = performance.now();
        observer.disconnect();
      }
    }).observe(document, { childList: true, subtree: true });
  });
  const coldPage = await cold.newPage();
  await coldPage.goto(`${BASE}/`);
  await coldPage.getByLabel('API key').waitFor();
  await coldPage.getByRole('button', { name: 'Sign in' }).waitFor();
  const t = await coldPage.evaluate(() => ({
    fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
    ui: window.__berthFirstUi,
  }));
  console.log(`  first contentful paint ${t.fcp?.toFixed(0)} ms, sign-in form in the DOM at ${t.ui?.toFixed(0)} ms`);
  check(t.fcp !== undefined && t.ui !== undefined, `no paint timing: ${JSON.stringify(t)}`);
  // 1 s on an idle host; the budget grows with the host's load (the suite runs VMs beside
  // this browser on two cores), as every deadline here does. The figure itself is printed.
  const budget = 1000 * Math.max(1, os.loadavg()[0] / os.cpus().length);
  check(Math.max(t.fcp, t.ui) < budget, `first render took ${Math.max(t.fcp, t.ui).toFixed(0)} ms (budget ${budget.toFixed(0)} ms at load ${os.loadavg()[0].toFixed(1)})`);
  await shoot(coldPage, 'signin');
  await coldPage.getByLabel('API key').fill(ADMIN);
  await coldPage.getByRole('button', { name: 'Sign in' }).click();
  await coldPage.getByRole('button', { name: 'New box' }).waitFor();
  const stored = await coldPage.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + location.href);
  check(!stored.includes(ADMIN), 'the API key is kept in web storage or the address');
  await cold.close();
});

test('the app shell is under 60 KB gzipped', async () => {
  const { total, parts } = await shellSize(BASE);
  console.log(`  app shell: ${(total / 1024).toFixed(1)} KB gzipped (${parts.map((p) => `${p.path} ${(p.gz / 1024).toFixed(1)}`).join(', ')})`);
  check(total < 60 * 1024, `app shell is ${total} bytes gzipped`);
  // The service worker precaches the shell, not the terminal's chunk (loaded on demand).
  const sw = await (await fetch(`${BASE}/sw.js`)).text();
  const scripts = parts.filter((p) => p.path.endsWith('.js'));
  check(scripts.length > 0 && scripts.every((p) => sw.includes(p.path)), `sw.js does not precache ${scripts.map((p) => p.path).join(', ')}`);
  let terminal = null;
  for (const p of scripts) terminal ??= /terminal-[A-Za-z0-9]+\.js/.exec(await (await fetch(`${BASE}${p.path}`)).text())?.[0];
  check(terminal, 'no terminal chunk is imported by the shell');
  check(!sw.includes(terminal), `sw.js precaches the terminal chunk ${terminal}`);
});

test('pair through the link printed by berth pair', async () => {
  const out = execFileSync(need('BERTH_BIN'), ['--data-dir', need('BERTH_DATA_DIR'), 'pair', '--json'], { encoding: 'utf8' });
  const { url, code } = JSON.parse(out);
  check(url.startsWith(`${BASE}/#/pair/`), `the link ${url} is not ${BASE}/#/pair/<code>`);
  await page.goto(url);
  await page.getByRole('button', { name: 'New box' }).waitFor();
  check(!page.url().includes(code), `the code is still in the address: ${page.url()}`);
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
  check(!stored.includes(code) && !stored.includes(ADMIN), `web storage holds a secret: ${stored}`);
  const cookie = (await context.cookies()).find((c) => c.name === '__Host-berth_session');
  check(cookie?.httpOnly && cookie.sameSite === 'Strict' && cookie.secure && cookie.path === '/', `session cookie: ${JSON.stringify(cookie)}`);
  // The code is one use: a second browser cannot sign in with it.
  const again = await fetch(`${BASE}/v1/web/sessions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ pairing_code: code }) });
  check(again.status === 401, `the used code signed in again: ${again.status}`);
});

test('create a box from echo, talk, reload, wake it', async () => {
  const dialog = await createBox(page, CHAT);
  await shoot(page, 'new-box');
  await dialog.getByRole('button', { name: 'Create' }).click();
  await dialog.waitFor({ state: 'detached' });
  await page.goto(`${BASE}/#/boxes`);
  await page.getByRole('list', { name: 'Boxes' }).getByRole('link', { name: CHAT, exact: true }).waitFor();
  await shoot(page, 'boxes');
  await openChat(page, CHAT);
  await send(page, 'remember 42');
  await shows(page, 'OK, I will remember 42.');
  await shoot(page, 'chat');
  await page.reload();
  await shows(page, 'OK, I will remember 42.', 15_000);
  // The message itself, as its own bubble (the answer's text holds these words too).
  await until('your "remember 42" after the reload', 5000, async () =>
    (await log(page).getByRole('article', { name: 'You' }).allInnerTexts()).some((t) => t.trim() === 'remember 42'));

  await admin.patch(CHAT, { stop_after_s: 1 });
  await until(`${CHAT} reclaimed`, 60_000, async () => (await admin.box(CHAT)).state === 'stopped');
  // A sandbox box wakes in well under a second, too fast to photograph: the message is
  // held in the browser while the waking state is shot, then let go to wake the box.
  const { release, restore } = await holdMessagePosts(page);
  const before = (await admin.events(CHAT)).length;
  await send(page, 'what did I say?');
  const waking = page.getByRole('status').filter({ hasText: /^\s*Waking your agent/ });
  try {
    await waking.first().waitFor({ timeout: 30_000 });
    await shoot(page, 'waking');
  } finally {
    release();
  }
  await shows(page, 'You said: remember 42');
  await restore();
  const woke = (await admin.events(CHAT)).slice(before).filter((e) => e.type === 'state').map((e) => e.data.state);
  check(woke.includes('starting') && woke.includes('running'), `the message did not wake the box: states ${woke.join(', ')}`);
  await admin.patch(CHAT, { stop_after_s: 300 });
});

test('markup in an answer renders inert', async () => {
  await renderCheck(page, { send, shows, log });
});

test('Files shows /memory/README.md rendered', async () => {
  const readme = '# Memory of chat-e2e\n\nWhat the agent keeps: **bold** and a [[notes]] link.\n';
  const put = await fetch(`${BASE}/v1/boxes/${CHAT}/files?path=/memory/README.md`, { method: 'PUT', headers: { Authorization: `Bearer ${ADMIN}` }, body: readme });
  check(put.status === 204, `PUT README.md: ${put.status} ${await put.text()}`);
  await page.getByRole('tab', { name: 'Files' }).click();
  await page.getByRole('link', { name: '/memory', exact: true }).click();
  const entry = page.getByRole('link', { name: 'README.md', exact: true });
  await entry.waitFor();
  await shoot(page, 'files');
  await entry.click();
  await page.getByRole('heading', { name: 'Memory of chat-e2e' }).waitFor();
  check((await page.locator('strong', { hasText: 'bold' }).count()) > 0, 'the markdown **bold** is not rendered bold');
  const wiki = await page.getByRole('link', { name: 'notes', exact: true }).getAttribute('href');
  check(decodeURIComponent(wiki ?? '').endsWith('files?path=/memory/notes.md'), `[[notes]] links to ${wiki}, not /memory/notes.md`);
  await shoot(page, 'markdown');
});

test('Terminal runs echo $((6*7)) and shows 42', async () => {
  await page.getByRole('tab', { name: 'Terminal' }).click();
  for (const key of ['Esc', 'Tab', 'Ctrl', 'Up', 'Down', 'Left', 'Right']) {
    await page.getByRole('button', { name: key, exact: true }).waitFor();
  }
  const term = page.locator('.xterm');
  await term.waitFor();
  await until('a shell prompt', 30_000, async () => /[$#]\s*$/m.test(await term.locator('.xterm-rows').innerText()));
  await term.click();
  await page.keyboard.type('echo $((6*7))');
  await page.keyboard.press('Enter');
  await until('42 on its own line', 30_000, async () => (await term.locator('.xterm-rows').innerText()).split('\n').some((l) => l.trim() === '42'));
  await shoot(page, 'terminal');
});

test('offline in the middle of an answer, then back', async () => {
  await offlineScenario({ page, context, admin, appConsole, createBox, openChat, send, shows, log, boxesMade });
});

test('push reaches a Web Push service and the service worker shows it', async () => {
  await page.goto(`${BASE}/#/boxes`);
  const ready = await page.evaluate(() => Promise.race([
    navigator.serviceWorker.ready.then((r) => r.active?.scriptURL),
    new Promise((r) => setTimeout(() => r(null), 10_000)),
  ]));
  check(ready, 'no active service worker 10 s after loading the app');
  const sub = push.subscribe();
  const registered = await page.evaluate(async (body) => {
    const res = await fetch('/v1/web/push/subscriptions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, body: await res.text() };
  }, { endpoint: sub.endpoint, expirationTime: null, keys: sub.keys });
  check(registered.status === 201, `POST /v1/web/push/subscriptions: ${registered.status} ${registered.body}`);
  const { public_key: vapidKey } = await admin.call('GET', '/v1/web/push/key');
  // While the chat is on screen, a turn's end is not pushed: the screen shows it.
  await openChat(page, CHAT);
  // Watching starts when the chat's event stream is open, not when the screen is drawn.
  await page.locator('[role="log"][data-live]').waitFor();
  await admin.send(CHAT, 'watched turn 3d');
  await shows(page, 'echo: watched turn 3d');
  // No screen watches the box now: the turn's end is pushed. Pushes leave in turn order,
  // so had the watched turn been pushed, it would arrive first.
  await page.goto('about:blank');
  await admin.send(CHAT, 'push probe 9f');
  const got = await push.next(sub.id, 90_000);
  check(!got.plaintext?.includes('watched turn 3d'), `a turn the chat showed was pushed too: ${got.plaintext}`);
  check(!got.error, `the push service refused berth's push: ${got.error}`);
  check(got.vapidKey === vapidKey, `VAPID k ${got.vapidKey} is not GET /v1/web/push/key's ${vapidKey}`);
  check(got.headers.urgency === 'normal', `Urgency: ${got.headers.urgency}`);
  const p = got.payload;
  check(p.title === CHAT && p.box === CHAT && p.url === `/#/boxes/${CHAT}/chat` && p.body.startsWith('echo: push probe 9f'), `payload ${got.plaintext}`);

  page = await context.newPage();
  await page.goto(`${BASE}/#/boxes`);
  const cdp = await context.newCDPSession(page);
  const registrations = new Map();
  cdp.on('ServiceWorker.workerRegistrationUpdated', ({ registrations: list }) => list.forEach((r) => registrations.set(r.registrationId, r)));
  await cdp.send('ServiceWorker.enable');
  const reg = await until('the app\'s service worker registration', 15_000, async () =>
    [...registrations.values()].find((r) => r.scopeURL === `${BASE}/` && !r.isDeleted));
  await cdp.send('ServiceWorker.deliverPushMessage', { origin: BASE, registrationId: reg.registrationId, data: got.plaintext });
  const worker = await until('the service worker in Playwright', 15_000, async () => context.serviceWorkers().find((w) => w.url().startsWith(`${BASE}/`)));
  let seen = [];
  const shown = await until('the notification', 15_000, async () => {
    seen = await worker.evaluate(async () => (await self.registration.getNotifications()).map((n) => ({ title: n.title, body: n.body, data: n.data })));
    return seen.find((n) => n.title === CHAT);
  }).catch((e) => {
    throw new Error(`${e.message}; the worker ${worker.url()} (registration ${reg.registrationId} of ${registrations.size}) shows ${JSON.stringify(seen)}`);
  });
  check(shown.body.startsWith('echo: push probe 9f'), `notification body ${shown.body}`);
  // What a tap opens (the worker's notificationclick navigates to it).
  check(shown.data?.url === `/#/boxes/${CHAT}/chat`, `the notification opens ${JSON.stringify(shown.data)}`);
});

test('stop, then delete with confirmation', async () => {
  await openChat(page, CHAT);
  await until(`${CHAT} running`, 60_000, async () => (await admin.box(CHAT)).state === 'running');
  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await until(`${CHAT} stopped by Stop`, 60_000, async () => (await admin.box(CHAT)).state === 'stopped');
  await page.getByRole('button', { name: 'Delete', exact: true }).click();
  await page.getByRole('button', { name: 'Delete box' }).waitFor();
  await shoot(page, 'delete');
  await page.getByRole('button', { name: 'Delete box' }).click();
  await until(`${CHAT} deleted`, 60_000, async () => !(await admin.boxes()).some((b) => b.name === CHAT));
  boxesMade.delete(CHAT);
});
