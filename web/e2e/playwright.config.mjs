// The web app's end-to-end tests (`npx playwright test`, started by
// crates/cli/tests/web_app.rs): Debian's chromium, never a downloaded browser, one worker
// (the scenarios share one daemon), each test reported on its own.
import { defineConfig } from '@playwright/test';

import { chromiumArgs, SHOTS } from './lib/env.mjs';

export default defineConfig({
  testDir: 'tests',
  testMatch: '*.spec.mjs',
  // BERTH_E2E_GREP=offline runs only the tests whose titles match (a developer's loop).
  grep: process.env.BERTH_E2E_GREP ? new RegExp(process.env.BERTH_E2E_GREP) : undefined,
  globalSetup: './lib/global-setup.mjs',
  globalTeardown: './lib/global-teardown.mjs',
  workers: 1,
  fullyParallel: false,
  forbidOnly: true,
  retries: 0,
  // Boxes wake on a loaded 2-core host, and one scenario waits for an idle reclaim.
  timeout: 5 * 60_000,
  reporter: [['list']],
  outputDir: `${SHOTS}/results`,
  use: {
    browserName: 'chromium',
    headless: true,
    launchOptions: { executablePath: process.env.BERTH_CHROMIUM || '/usr/bin/chromium', args: chromiumArgs() },
    screenshot: 'only-on-failure',
    // A step that hangs fails within a minute, not at the test's limit.
    actionTimeout: 60_000,
    navigationTimeout: 60_000,
  },
});
