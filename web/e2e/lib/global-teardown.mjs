// After the run: a screenshot of every screen, light and dark (docs/webapp.md).
import fs from 'node:fs';

import { SCREENS, SHOTS } from './env.mjs';

export default function globalTeardown() {
  if (process.env.BERTH_E2E_GREP) return; // a few tests ran, not every screen
  const missing = SCREENS.flatMap((s) => ['light', 'dark'].map((m) => `${s}-${m}.png`)).filter((f) => !fs.existsSync(`${SHOTS}/${f}`));
  if (missing.length) throw new Error(`screenshots missing in ${SHOTS}: ${missing.join(', ')}`);
  console.log(`screenshots of every screen, light and dark, in ${SHOTS}`);
}
