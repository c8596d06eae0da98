// The Desktop tab on a real box of the `desktop` template (Xvfb, XFCE and x11vnc as its
// services): shown only for a box whose template has a desktop; the live screen drawn by
// noVNC (its pixels sampled: not one colour); watching sends no input, "Take control" does
// (a tap lands where it was aimed, as the box's own `xdotool getmouselocation` says); a
// dropped connection (the VNC service restarted) comes back by itself; a box that went to
// sleep stays asleep until "Wake and reconnect". Skipped when the `desktop` image could
// not be built (crates/cli/tests/web_app.rs says why).
import { test } from '@playwright/test';

import { api, until } from '../lib/api.mjs';
import { screen, watchConsole } from '../lib/checks.mjs';
import { ADMIN, BASE, check, DESKTOP_SKIP, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';

const admin = api(BASE, ADMIN);
const BOX = 'desktop-e2e';
const PLAIN = 'desktop-e2e-plain';
const boxesMade = new Set();
// The desktop boots XFCE on a loaded host.
const BOOT_MS = 4 * 60_000;

test.afterAll(async () => {
  for (const name of boxesMade) await admin.remove(name).catch(() => {});
});

async function shoot(page, name) {
  const problems = await screen(page, SHOTS, name);
  check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
}

/** The canvas noVNC draws on: its size in the box's pixels, where it is on the page, and how
 * many colours a sample of its pixels has (one: nothing drawn yet). */
async function canvas(page) {
  return page.evaluate(() => {
    const el = document.querySelector('.desktop-screen canvas');
    if (!el || !el.width || !el.height) return { width: 0, height: 0, colours: 0 };
    const data = el.getContext('2d').getImageData(0, 0, el.width, el.height).data;
    const colours = new Set();
    // Every 97th pixel, each channel to 4 bits: noise aside, the screen's own colours.
    for (let i = 0; i < data.length; i += 4 * 97) colours.add(((data[i] >> 4) << 8) | ((data[i + 1] >> 4) << 4) | (data[i + 2] >> 4));
    const rect = el.getBoundingClientRect();
    return { width: el.width, height: el.height, colours: colours.size, rect: { x: rect.x, y: rect.y, w: rect.width, h: rect.height } };
  });
}

/** Waits until the canvas shows a screen of the box's size with many colours (XFCE's
 * desktop and panel), not one colour. */
async function liveScreen(page) {
  return until('the live screen on the canvas', BOOT_MS, async () => {
    const c = await canvas(page);
    return c.width === 1024 && c.height === 768 && c.colours >= 8 ? c : null;
  });
}

/** Waits until XFCE (the `xfce` service) is ready: its panel is drawn. */
async function xfceReady() {
  await until('the xfce service ready', BOOT_MS, async () => {
    const { services } = await admin.call('GET', `/v1/boxes/${BOX}/services`);
    return services.some((s) => s.name === 'xfce' && s.state === 'running' && s.ready_at_ms);
  });
}

/** The box's pointer, as the box's X server says. */
async function pointer() {
  const out = await admin.call('POST', `/v1/boxes/${BOX}/exec`, { cmd: ['xdotool', 'getmouselocation'], env: { DISPLAY: ':0' } });
  check(out.exit_code === 0, `xdotool getmouselocation: ${JSON.stringify(out)}`);
  const [, x, y] = /x:(\d+) y:(\d+)/.exec(out.stdout);
  return { x: Number(x), y: Number(y) };
}

/** Taps the screen at the box's pixel (x, y), through the canvas's scale. */
async function tapAt(page, c, x, y) {
  await page.touchscreen.tap(c.rect.x + ((x + 0.5) * c.rect.w) / c.width, c.rect.y + ((y + 0.5) * c.rect.h) / c.height);
}

const near = (p, x, y) => Math.abs(p.x - x) <= 2 && Math.abs(p.y - y) <= 2;

test('Desktop tab: the live screen, watching, taking control, reconnecting, a sleeping box', async ({ browser }) => {
  if (DESKTOP_SKIP) console.log(`  SKIPPED: ${DESKTOP_SKIP}`);
  test.skip(!!DESKTOP_SKIP, `SKIPPED: ${DESKTOP_SKIP}`);
  for (const [name, template] of [[BOX, 'desktop'], [PLAIN, 'echo']]) {
    await admin.call('POST', '/v1/boxes', { name, template });
    boxesMade.add(name);
  }
  const context = await browser.newContext(phone);
  const watched = watchConsole(context);
  watched.expect(signedOutProbe, 'the signed-out session probe');
  const page = await context.newPage();
  // What the page sends on the desktop's sockets: RFB's client messages.
  const sent = [];
  page.on('websocket', (ws) => {
    if (ws.url().endsWith('/desktop/vnc')) ws.on('framesent', (frame) => typeof frame.payload !== 'string' && sent.push(Buffer.from(frame.payload)));
  });
  await page.goto(`${BASE}/`);
  await page.getByLabel('API key').fill(ADMIN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'New box' }).waitFor();

  // A box without a desktop has no Desktop tab (once its template is known).
  const templates = page.waitForResponse((r) => r.url().endsWith('/v1/templates'));
  await page.goto(`${BASE}/#/boxes/${PLAIN}/chat`);
  await templates;
  await page.getByRole('tab', { name: 'Terminal' }).waitFor();
  check((await page.getByRole('tab', { name: 'Desktop' }).count()) === 0, `${PLAIN} (echo) shows a Desktop tab`);

  // A desktop box has one; opening it wakes the box and shows its screen.
  await page.goto(`${BASE}/#/boxes/${BOX}/chat`);
  await page.getByRole('tab', { name: 'Desktop' }).click();
  await page.waitForURL(/\/desktop$/);
  const status = page.locator('.desktop-status');
  await status.filter({ hasText: 'Connected: watching' }).waitFor({ timeout: BOOT_MS });
  // How long the desktop took to come up, measured in the box, under the screen.
  await page.locator('.desktop-note').filter({ hasText: /^Desktop ready \d+\.\d s after the box started\.$/ }).waitFor({ timeout: 60_000 });
  const c = await liveScreen(page);
  await xfceReady();
  check(c.rect.w <= 390 && c.rect.w >= 300, `the screen is ${c.rect.w} px wide on a 390 px phone: not scaled to fit`);

  // Watching: a tap sends nothing.
  const before = await pointer();
  const [wx, wy] = near(before, 200, 300) ? [600, 500] : [200, 300];
  await tapAt(page, c, wx, wy);
  await page.waitForTimeout(2000);
  const still = await pointer();
  check(!near(still, wx, wy), `a view-only tap moved the box's pointer to ${JSON.stringify(still)}`);
  await shoot(page, 'desktop');

  // Take control: a tap lands where it was aimed.
  await page.getByRole('button', { name: 'Take control' }).click();
  await status.filter({ hasText: 'Connected: in control' }).waitFor();
  await tapAt(page, c, 300, 400);
  const landed = await until('the tap at (300, 400) in the box', 15_000, async () => {
    const p = await pointer();
    return near(p, 300, 400) ? p : null;
  });
  console.log(`  the box's pointer after the tap: ${JSON.stringify(landed)}`);
  await shoot(page, 'desktop-control');
  // The phone's keyboard: what is typed in the field goes out as RFB key events (type 4,
  // the character's keysym), press and release.
  const keyEvents = () => sent.filter((b) => b.length === 8 && b[0] === 4).map((b) => `${b[1] ? 'down' : 'up'}:${b.readUInt32BE(4).toString(16)}`);
  const typedBefore = keyEvents().length;
  await page.getByRole('textbox', { name: 'Type into the desktop' }).pressSequentially('hé', { delay: 50 });
  await until('the typed keys sent', 10_000, async () => keyEvents().length >= typedBefore + 4);
  const typed = keyEvents().slice(typedBefore);
  check(JSON.stringify(typed) === JSON.stringify(['down:68', 'up:68', 'down:e9', 'up:e9']), `key events sent: ${JSON.stringify(typed)}`);

  // A drop (the VNC server restarted) reconnects by itself, still in control. From here
  // on the test drops the connection on purpose (a restart, then a stop): a retry the
  // daemon refuses meanwhile (503: the server is not listening) is logged by the browser.
  watched.expect(
    (text) => /desktop\/vnc' failed: .*Unexpected response code: 503/.test(text),
    'a reconnect refused while the VNC server restarts or the box stops',
  );
  await admin.call('POST', `/v1/boxes/${BOX}/services/vnc/restart`);
  await status.filter({ hasText: 'Reconnecting' }).waitFor({ timeout: 60_000 });
  await status.filter({ hasText: 'Connected: in control' }).waitFor({ timeout: 120_000 });
  await liveScreen(page);
  await page.getByRole('button', { name: 'Stop controlling' }).click();
  await status.filter({ hasText: 'Connected: watching' }).waitFor();

  // A box that goes to sleep is not woken by the tab: it waits to be asked.
  await admin.call('POST', `/v1/boxes/${BOX}/stop`);
  await status.filter({ hasText: /The box is .*watching does not keep it awake/ }).waitFor({ timeout: 120_000 });
  const wake = page.getByRole('button', { name: 'Wake and reconnect' });
  await wake.waitFor();
  await until(`${BOX} stopped`, 60_000, async () => (await admin.box(BOX)).state === 'stopped');
  await shoot(page, 'desktop-asleep');
  await page.waitForTimeout(3000);
  check((await admin.box(BOX)).state === 'stopped', 'the Desktop tab woke a sleeping box by itself');
  await wake.click();
  await status.filter({ hasText: 'Connected: watching' }).waitFor({ timeout: BOOT_MS });
  await liveScreen(page);

  // Leaving the tab disconnects.
  await page.getByRole('tab', { name: 'Chat' }).click();
  await page.waitForURL(/\/chat$/);
  // The URL changes before the app renders the new tab: once the Chat panel shows, the
  // Desktop one (and its connection's canvas) must be gone with it.
  await page.getByRole('tabpanel', { name: 'Chat' }).waitFor();
  check((await page.locator('.desktop-screen canvas').count()) === 0, 'the screen outlived its tab');

  await context.close();
  check(watched.errors.length === 0, `console errors:\n  ${watched.errors.join('\n  ')}`);
});
