// Issue 21: a message of ours is pending until the `user` event that replays it, matched by
// the message's id (its idempotency key), never by its words: the same words from another
// sender do not pass for ours, and the same words sent twice are two delivered messages.
import { test } from '@playwright/test';

import { api, until } from '../lib/api.mjs';
import { createBox, holdMessagePosts, log, openChat, send } from '../lib/app.mjs';
import { screen, watchConsole } from '../lib/checks.mjs';
import { ADMIN, BASE, check, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';

const admin = api(BASE, ADMIN);
const BOX = 'same-text-e2e';
const WORDS = 'the same words 4b';
const boxesMade = new Set();

test.afterAll(async () => {
  for (const name of boxesMade) await admin.remove(name).catch(() => {});
});

test('the same words twice and from another sender: each bubble is its own message', async ({ browser }) => {
  const context = await browser.newContext(phone);
  const watched = watchConsole(context);
  watched.expect(signedOutProbe, 'the signed-out session probe');
  const page = await context.newPage();
  await page.goto(`${BASE}/`);
  await page.getByLabel('API key').fill(ADMIN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'New box' }).waitFor();
  const dialog = await createBox(page, BOX, boxesMade);
  await dialog.getByRole('button', { name: 'Create' }).click();
  await dialog.waitFor({ state: 'detached' });
  await openChat(page, BOX);
  await page.locator('[role="log"][data-live]').waitFor();

  const mine = log(page).getByRole('article', { name: 'You' });
  const pendingOnes = log(page).locator('article.msg.user.pending');
  const delivered = log(page).locator('article.msg.user:not(.pending)', { hasText: WORDS });
  const answers = log(page).getByRole('article', { name: 'Agent' }).filter({ hasText: `echo: ${WORDS}` });

  // Our messages are held in the browser while another sender's, of the same words,
  // reaches the box and is replayed.
  const { release, restore } = await holdMessagePosts(page);
  try {
    await send(page, WORDS);
    await until('our message pending', 10_000, async () => (await pendingOnes.count()) === 1);
    await admin.send(BOX, WORDS);
    await until("the other sender's message answered", 60_000, async () => (await answers.count()) === 1);
    check((await delivered.count()) === 1, `${await delivered.count()} delivered bubbles of ${JSON.stringify(WORDS)}, not the other sender's one`);
    check((await pendingOnes.count()) === 1, "another sender's same words passed for our message, still held in the browser");
    // The same words again, from us.
    await send(page, WORDS);
    await until('both of ours pending', 10_000, async () => (await pendingOnes.count()) === 2);
    const problems = await screen(page, SHOTS, 'chat-pending');
    check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
  } finally {
    release();
  }
  await until('three answers', 60_000, async () => (await answers.count()) === 3);
  await until('no message left pending', 10_000, async () => (await pendingOnes.count()) === 0);
  await restore();
  check((await delivered.count()) === 3, `${await delivered.count()} delivered bubbles of ${JSON.stringify(WORDS)}, not 3`);
  check((await mine.count()) === 3, `${await mine.count()} bubbles of yours, not 3`);

  // The API agrees: three messages delivered, each replayed once, each replay naming its own.
  const stored = (await admin.messages(BOX)).filter((m) => m.content === WORDS);
  check(stored.length === 3 && stored.every((m) => m.state === 'delivered'), `messages: ${JSON.stringify(stored)}`);
  const named = (await admin.events(BOX)).filter((e) => e.type === 'user').map((e) => e.data.message_id);
  check(JSON.stringify(named) === JSON.stringify(stored.map((m) => m.id)), `the replays name ${named.join(', ')}, the messages are ${stored.map((m) => m.id).join(', ')}`);

  // After a reload, the history shows the three and nothing pending.
  await page.reload();
  await until('the history after a reload', 30_000, async () => (await delivered.count()) === 3 && (await pendingOnes.count()) === 0);
  await context.close();
  check(watched.errors.length === 0, `console errors:\n  ${watched.errors.join('\n  ')}`);
});
