// Before the run: a screenshot left by an earlier run must not stand in for one this run
// failed to take.
import fs from 'node:fs';

import { SHOTS } from './env.mjs';

export default function globalSetup() {
  fs.mkdirSync(SHOTS, { recursive: true });
  for (const f of fs.readdirSync(SHOTS)) if (f.endsWith('.png')) fs.rmSync(`${SHOTS}/${f}`);
}
