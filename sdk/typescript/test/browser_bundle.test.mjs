// The SDK bundles for a browser: its Node-only pieces (the `tar` and `ws` packages, local
// files) are imported only when a Node-only call needs them, and the package's `browser`
// field leaves them out of a browser bundle.

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { build } from "esbuild";

test("a browser bundle of the SDK holds no Node built-in or Node-only package", async () => {
  const sdk = fileURLToPath(new URL("..", import.meta.url));
  const result = await build({
    stdin: { contents: 'export { Berth } from "@berth/sdk";', resolveDir: sdk, loader: "js" },
    // The package by its own name, as an app would import it.
    alias: { "@berth/sdk": `${sdk}dist/index.js` },
    bundle: true,
    platform: "browser",
    format: "esm",
    write: false,
    logLevel: "silent",
  });
  assert.deepEqual(result.errors, []);
  const code = result.outputFiles[0].text;
  assert.ok(!/from\s*["']node:|require\(["']node:/.test(code), "a node: import is left in the bundle");
  assert.ok(!code.includes("minipass") && !code.includes("permessage-deflate"), "tar or ws was bundled");
  assert.ok(/class Berth\b|Berth = class\b/.test(code), "the client is in the bundle");
});
