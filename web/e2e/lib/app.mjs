// The app's screens as a phone user works them: shared by the scenarios of tests/.

import { until } from './api.mjs';
import { BASE } from './env.mjs';

export const log = (page) => page.getByRole('log', { name: 'Conversation' });
export const messageField = (page) => page.getByRole('textbox', { name: 'Message' });

/** Opens "New box" with `name` and the echo template filled in; returns the dialog. */
export async function createBox(page, name, boxesMade) {
  await page.goto(`${BASE}/#/boxes`);
  await page.getByRole('button', { name: 'New box' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.getByLabel('Name').fill(name);
  const template = dialog.getByLabel('Template');
  if ((await template.evaluate((el) => el.tagName)) === 'SELECT') await template.selectOption('echo');
  else await template.fill('echo');
  boxesMade.add(name);
  return dialog;
}

export async function openChat(page, name) {
  await page.goto(`${BASE}/#/boxes`);
  await page.getByRole('list', { name: 'Boxes' }).getByRole('link', { name, exact: true }).click();
  await messageField(page).waitFor();
}

export async function send(page, text) {
  await messageField(page).fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
}

/** Waits until the conversation shows `text`. */
export async function shows(page, text, ms = 60_000) {
  await until(`the conversation shows ${JSON.stringify(text)}`, ms, async () => (await log(page).innerText()).includes(text));
}

/**
 * Holds the app's message posts in the browser until `release()`; `restore()` stops
 * intercepting them.
 */
export async function holdMessagePosts(page) {
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  const messages = /\/v1\/boxes\/[^/]+\/messages$/;
  await page.route(messages, async (route) => {
    if (route.request().method() === 'POST') await held;
    await route.continue();
  });
  return { release, restore: () => page.unroute(messages) };
}
