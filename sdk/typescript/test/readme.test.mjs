// README.md's TypeScript example ("From code: the SDKs") runs as written against the
// daemon, importing this checkout's build for "@berth/sdk", and prints what its comments say.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { NotFound } from "../dist/index.js";
import { client, TEST_TIMEOUT_MS } from "./helpers.mjs";

const README = new URL("../../../README.md", import.meta.url);
const BOX = "quickstart-ts";

function readmeBlocks(lang) {
  const section = readFileSync(README, "utf8").split("### From code: the SDKs")[1].split("\n## ")[0];
  return [...section.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1]);
}

function run(file) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [file], { env: process.env, timeout: TEST_TIMEOUT_MS }, (error, stdout, stderr) =>
      error ? reject(new Error(`${error.message}\n${stdout}\n${stderr}`)) : resolve(stdout),
    );
  });
}

test("the README's example runs as written", { timeout: TEST_TIMEOUT_MS }, async () => {
  const [code] = readmeBlocks("ts");
  const dist = new URL("../dist/index.js", import.meta.url).href;
  const dir = mkdtempSync(join(tmpdir(), "berth-readme-"));
  const file = join(dir, "example.mjs");
  writeFileSync(file, code.replaceAll('"@berth/sdk"', JSON.stringify(dist)));
  let out;
  try {
    out = await run(file);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    // A failed run leaves no box behind.
    await client().boxes.delete(BOX).catch((e) => {
      if (!(e instanceof NotFound)) throw e;
    });
  }
  assert.match(out, /^55$/m);
  assert.match(out, /remember 42/);
  assert.match(out, /fetch\s+compile\s+test\s+exit 0/);
});
