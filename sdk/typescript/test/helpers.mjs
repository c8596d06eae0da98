// What every test file of the SDK's suite shares: a client of the daemon named by
// BERTH_URL and BERTH_API_KEY (crates/cli/tests/sdk_typescript.rs starts one), boxes made
// for one test and deleted after it whether it passed or not, and waiting for a condition
// (never for a time: the suite runs on loaded machines).

import { randomBytes } from "node:crypto";

import { Berth, NotFound } from "../dist/index.js";

/** What one test may take before it fails as hung. */
export const TEST_TIMEOUT_MS = 180_000;

/** A client of the daemon under test. */
export function client() {
  if (!process.env.BERTH_URL || !process.env.BERTH_API_KEY) {
    throw new Error("BERTH_URL and BERTH_API_KEY name the daemon under test");
  }
  return new Berth();
}

/** A box name no other test uses (names are unique per tenant). */
export function unique(prefix) {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** Polls `check` (which may be async) until it holds; fails naming `what` past `withinMs`. */
export async function waitUntil(check, what, withinMs = 30_000) {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** `promise`, or a failure naming `what` when it does not settle within `withinMs`. */
export async function within(promise, what, withinMs = 30_000) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${withinMs} ms`)), withinMs);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `body(make, berth)`: `make(prefix, fields)` makes a box; every one is deleted after
 * the body, whether it passed or not.
 */
export async function withBoxes(body) {
  const berth = client();
  const made = [];
  const make = async (prefix = "ts", fields = {}) => {
    const box = await berth.boxes.create(unique(prefix), fields);
    made.push(box);
    return box;
  };
  try {
    await body(make, berth);
  } finally {
    for (const box of made) {
      await box.delete().catch((error) => {
        if (!(error instanceof NotFound)) throw error;
      });
    }
  }
}

/** Runs `body(box, berth)` with a running box of the `host` template, deleted after. */
export async function withBox(body) {
  await withBoxes(async (make, berth) => body(await (await make()).start(), berth));
}

/** Reads an async iterator of bytes or chunks until `needles` all show; answers the text. */
export async function readUntil(iterable, ...needles) {
  let text = "";
  const decoder = new TextDecoder();
  for await (const piece of iterable) {
    text += piece instanceof Uint8Array ? decoder.decode(piece, { stream: true }) : piece.text;
    if (needles.every((needle) => text.includes(needle))) return text;
  }
  throw new Error(`ended before ${JSON.stringify(needles)}: ${JSON.stringify(text)}`);
}
