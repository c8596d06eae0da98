// What every screen is held to: no console error, no serious or critical axe-core
// violation, and a screenshot in light and dark.

import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/**
 * Collects console errors and uncaught exceptions of every page and worker of `context`.
 * `expect(allows, why)` allows, while in force, the errors `allows(text, url)` holds for:
 * the network failures the browser itself logs for what the test causes on purpose (going
 * offline, asking for the session before signing in); everything else fails the run.
 */
export function watchConsole(context) {
  const errors = [];
  const allowed = new Set();
  const note = (where, text, url) => {
    for (const a of allowed) if (a.allows(text, url ?? '')) return;
    errors.push(`${where}: ${text}${url ? ` (${url})` : ''}`);
  };
  const watchPage = (page) => {
    page.on('console', (msg) => {
      if (msg.type() === 'error') note(`console error on ${page.url()}`, msg.text(), msg.location()?.url);
    });
    page.on('pageerror', (err) => note(`uncaught on ${page.url()}`, String(err.stack ?? err)));
  };
  context.pages().forEach(watchPage);
  context.on('page', watchPage);
  context.on('serviceworker', (worker) => {
    worker.on('console', (msg) => msg.type() === 'error' && note(`service worker ${worker.url()}`, msg.text()));
  });
  return {
    errors,
    expect(allows, why) {
      const entry = { allows, why };
      allowed.add(entry);
      return () => allowed.delete(entry);
    },
  };
}

/** Runs axe-core on the page as it is; returns the serious and critical violations. */
export async function axe(page) {
  // Evaluated through the DevTools protocol, which the page's CSP does not govern: the app's
  // own `script-src 'self'` stays in force for everything else.
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join('; ')})`);
}

/**
 * Screenshots the page in light and dark to `<dir>/<screen>-<scheme>.png` and runs axe in
 * each; returns the violations, each prefixed with the screen and scheme.
 */
export async function screen(page, dir, name, { axeCheck = true } = {}) {
  const problems = [];
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    // Two frames: the scheme's styles are applied and painted before the shot.
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    await page.screenshot({ path: path.join(dir, `${name}-${scheme}.png`) });
    if (axeCheck) problems.push(...(await axe(page)).map((v) => `${name} (${scheme}): ${v}`));
  }
  await page.emulateMedia({ colorScheme: 'light' });
  return problems;
}
