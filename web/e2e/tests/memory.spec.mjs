// The Memory tab on a sleeping box: search as one types (the matched word marked, byte
// offsets after multi-byte text placed right), a file with its [[links]] followed and its
// backlinks, the back button through them, a file's history with the diff of a snapshot,
// and all of it without waking the box; then "Restore this version", which does.
import { test } from '@playwright/test';

import { api, until } from '../lib/api.mjs';
import { screen, watchConsole } from '../lib/checks.mjs';
import { ADMIN, BASE, check, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';

const admin = api(BASE, ADMIN);
const BOX = 'memory-e2e';
const NEVER_STARTED = 'memory-e2e-new';
const boxesMade = new Set();

// Multi-byte text before the match: the search's byte offsets are not string indices.
const ALICE_V1 = 'Café 🍵 — Alice likes [[bob]] and zanzibar tea.\n';
const ALICE_V2 = 'She met [[carol]] in Stone Town.\n';

test.afterAll(async () => {
  for (const name of boxesMade) await admin.remove(name).catch(() => {});
});

async function exec(box, script) {
  const out = await admin.call('POST', `/v1/boxes/${box}/exec`, { cmd: ['sh', '-c', script] });
  check(out.exit_code === 0, `exec ${script}: ${JSON.stringify(out)}`);
}

async function stop(box) {
  await admin.call('POST', `/v1/boxes/${box}/stop`);
  await until(`${box} stopped`, 60_000, async () => (await admin.box(box)).state === 'stopped');
}

async function shoot(page, name) {
  const problems = await screen(page, SHOTS, name);
  check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
}

test('Memory tab: search, links, backlinks and history of a sleeping box without waking it; restore', async ({ browser }) => {
  // Two snapshots of the memory: one at each stop whose memory changed.
  for (const name of [BOX, NEVER_STARTED]) {
    await admin.call('POST', '/v1/boxes', { name, template: 'echo' });
    boxesMade.add(name);
  }
  await exec(BOX, `mkdir -p /memory/entities && printf '%s' '${ALICE_V1}' > /memory/entities/alice.md && printf 'Bob knows [[alice]].\\n' > /memory/entities/bob.md`);
  await stop(BOX);
  await exec(BOX, `printf '%s' '${ALICE_V2}' >> /memory/entities/alice.md`);
  await stop(BOX);
  const snapshots = (await admin.call('GET', `/v1/boxes/${BOX}/memory/snapshots`)).snapshots;
  check(snapshots.length >= 2, `snapshots: ${JSON.stringify(snapshots)}`);
  const stateEvents = async () => (await admin.events(BOX)).filter((e) => e.type === 'state').length;
  const statesBefore = await stateEvents();

  const context = await browser.newContext(phone);
  const watched = watchConsole(context);
  watched.expect(signedOutProbe, 'the signed-out session probe');
  const page = await context.newPage();
  await page.goto(`${BASE}/`);
  await page.getByLabel('API key').fill(ADMIN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'New box' }).waitFor();

  // A box never started has no memory yet, and says so.
  await page.goto(`${BASE}/#/boxes/${NEVER_STARTED}/memory`);
  await page.getByText("No memory yet: it is made at the box's first start.").waitFor();
  await shoot(page, 'memory-empty');

  // The tab, chosen from the tab list: the files while nothing is typed.
  await page.goto(`${BASE}/#/boxes/${BOX}/chat`);
  await page.getByRole('tab', { name: 'Memory' }).click();
  await page.waitForURL(/\/memory$/);
  const tree = page.getByRole('list', { name: 'Memory files' });
  await tree.getByRole('link', { name: 'entities/alice.md' }).waitFor();

  // Search as one types: the hit, its word marked, the query in the address.
  const field = page.getByRole('searchbox', { name: 'Search memory' });
  await field.pressSequentially('zanzibar', { delay: 40 });
  const hits = page.getByRole('list', { name: 'Search results' });
  const hit = hits.getByRole('link').filter({ hasText: 'entities/alice.md' });
  await hit.waitFor();
  const marks = await hit.locator('mark').allTextContents();
  check(JSON.stringify(marks) === '["zanzibar"]', `marked: ${JSON.stringify(marks)}`);
  check((await hits.getByRole('link').count()) === 1, 'more than one hit for zanzibar');
  await until('the query in the address', 5000, async () => page.url().endsWith('/memory?q=zanzibar'));
  await shoot(page, 'memory-search');

  // The file: [[bob]] a link to entities/bob.md, [[carol]] (not written) marked, not a link.
  await hit.click();
  await page.waitForURL(/\/memory\?q=zanzibar&path=entities%2Falice\.md$/);
  const content = page.locator('.memory-content');
  const bob = content.getByRole('link', { name: 'bob', exact: true });
  await bob.waitFor();
  check((await bob.getAttribute('href')).endsWith('/memory?path=entities%2Fbob.md'), `[[bob]] leads to ${await bob.getAttribute('href')}`);
  check((await content.getByRole('link', { name: /carol/ }).count()) === 0, '[[carol]], not written, is a link');
  check((await content.locator('.wikilink-missing').innerText()).includes('carol'), '[[carol]] is not marked as not written');
  await page.getByRole('list', { name: 'Files that link here' }).getByRole('link', { name: 'entities/bob.md' }).waitFor();

  // Its history: the newest snapshot's change to it, as a diff.
  const newest = page.getByRole('list', { name: /Snapshots/ }).getByRole('button').first();
  await newest.click();
  const diff = page.getByLabel('Changes to the file');
  await diff.waitFor();
  const added = await diff.locator('.diff-add').allTextContents();
  check(added.some((l) => l.includes('She met [[carol]] in Stone Town.')), `added lines: ${JSON.stringify(added)}`);
  await until('the snapshot in the address', 5000, async () => /&at=ms_/.test(page.url()));
  await diff.scrollIntoViewIfNeeded();
  await shoot(page, 'memory-history');

  // Follow [[bob]]: bob.md's backlinks name alice.md.
  await content.getByRole('link', { name: 'bob', exact: true }).click();
  await page.waitForURL(/\/memory\?path=entities%2Fbob\.md$/);
  const backlinks = page.getByRole('list', { name: 'Files that link here' });
  await backlinks.getByRole('link', { name: 'entities/alice.md' }).waitFor();
  await content.getByRole('link', { name: 'alice', exact: true }).waitFor();
  await shoot(page, 'memory-file');

  // The back button: alice.md, then the search as it was.
  await page.goBack();
  await page.waitForURL(/path=entities%2Falice\.md/);
  await content.getByRole('link', { name: 'bob', exact: true }).waitFor();
  await page.goBack();
  await page.waitForURL(/\/memory\?q=zanzibar$/);
  await hit.waitFor();
  check((await field.inputValue()) === 'zanzibar', `the field holds ${await field.inputValue()}`);

  // No hit: said so. An emptied field: the files again.
  await field.fill('qwxzzy');
  await page.getByText('No file matches “qwxzzy”.').waitFor();
  await field.fill('');
  await tree.getByRole('link', { name: 'entities/bob.md' }).waitFor();

  // None of it woke the box.
  const box = await admin.box(BOX);
  check(box.state === 'stopped', `the box is ${box.state} after the Memory tab's reads`);
  check((await stateEvents()) === statesBefore, 'the box changed state while the Memory tab read it');

  // Restore the oldest version of alice.md: confirmed, it wakes the box, and the version
  // before it is kept as a snapshot.
  await page.goto(`${BASE}/#/boxes/${BOX}/memory?path=entities%2Falice.md`);
  const oldest = page.getByRole('list', { name: /Snapshots/ }).getByRole('button').last();
  await oldest.click();
  await page.getByRole('button', { name: 'Restore this version' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.getByRole('heading', { name: 'Restore this version?' }).waitFor();
  await shoot(page, 'memory-restore');
  await dialog.getByRole('button', { name: 'Restore', exact: true }).click();
  const restored = page.getByRole('status').filter({ hasText: 'Restored; the version before is kept as snapshot ms_' });
  await restored.waitFor({ timeout: 120_000 });
  const before = /snapshot (ms_\w+)/.exec(await restored.innerText())[1];
  const after = await admin.call('GET', `/v1/boxes/${BOX}/memory/snapshots`);
  check(after.snapshots.some((s) => s.id === before && s.reason === 'before_restore'), `no before_restore snapshot ${before}: ${JSON.stringify(after)}`);
  const text = await (await fetch(`${BASE}/v1/boxes/${BOX}/memory/entities/alice.md`, { headers: { Authorization: `Bearer ${ADMIN}` } })).text();
  check(text === ALICE_V1, `alice.md after the restore: ${JSON.stringify(text)}`);
  await until('the restored version shown', 30_000, async () => {
    const shown = await content.innerText();
    return shown.includes('zanzibar tea') && !shown.includes('Stone Town');
  });
  await shoot(page, 'memory-restored');

  await context.close();
  check(watched.errors.length === 0, `console errors:\n  ${watched.errors.join('\n  ')}`);
});
