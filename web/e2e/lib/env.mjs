// What crates/cli/tests/web_app.rs passes to the run, and the phone every test is:
//   BERTH_URL          the daemon's URL (http://127.0.0.1:PORT, or https:// with TLS)
//   BERTH_ADMIN_KEY    its admin key (the test's own API calls: never the browser's)
//   BERTH_BIN          the `berth` CLI, BERTH_DATA_DIR its data dir (`berth pair --json`)
//   BERTH_SCREENSHOTS  where <screen>-<light|dark>.png go
//   BERTH_PUSH_PORT    a free loopback port for the Web Push test service, which the
//                      daemon's berth.toml `[push] allow_endpoints` allows
//   BERTH_TLS_CERT     (with https) the daemon's certificate: chromium trusts its key
//   BERTH_CHROMIUM     (optional) the browser, default /usr/bin/chromium
//   BERTH_COOKIE_APP   tenant A's app of the session-fixation scenarios (issue 20)
//   BERTH_DESKTOP_SKIP (when set) why the Desktop tab's test is skipped: the `desktop`
//                      image could not be built

import crypto from 'node:crypto';
import fs from 'node:fs';

export function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (crates/cli/tests/web_app.rs sets it)`);
  return value;
}

export const BASE = need('BERTH_URL').replace(/\/$/, '');
export const ADMIN = need('BERTH_ADMIN_KEY');
export const SHOTS = need('BERTH_SCREENSHOTS');
export const DESKTOP_SKIP = process.env.BERTH_DESKTOP_SKIP || null;
export const SCREENS = [
  'signin', 'boxes', 'new-box', 'chat', 'waking', 'files', 'markdown', 'terminal', 'delete', 'cookie-conflict', 'history-paged', 'chat-pending',
  'memory-empty', 'memory-search', 'memory-history', 'memory-file', 'memory-restore', 'memory-restored', 'pair-confirm',
  ...(DESKTOP_SKIP ? [] : ['desktop', 'desktop-control', 'desktop-asleep']),
];

export const phone = {
  viewport: { width: 390, height: 844 },
  hasTouch: true,
  isMobile: true,
  deviceScaleFactor: 3,
};

export function chromiumArgs() {
  // root in a container: chromium's own sandbox needs user namespaces it may not have.
  const args = ['--no-sandbox'];
  const cert = process.env.BERTH_TLS_CERT;
  if (cert) {
    // Trust the daemon's test certificate by its key, as a phone trusts a real one: a
    // service worker registers only over a certificate the browser accepts.
    const spki = new crypto.X509Certificate(fs.readFileSync(cert)).publicKey.export({ type: 'spki', format: 'der' });
    args.push(`--ignore-certificate-errors-spki-list=${crypto.createHash('sha256').update(spki).digest('base64')}`);
  }
  return args;
}

// Asking for the session before signing in is answered 401 by design, and chromium logs
// every 401 as a console error: that one is expected, on the session route only.
export const signedOutProbe = (text, url) => /status of 401/.test(text) && /\/v1\/web\/session$/.test(url);

export function check(condition, why) {
  if (!condition) throw new Error(why);
}
