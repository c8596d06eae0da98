// Exec: collected, and streamed to callbacks as the output comes.

import assert from "node:assert/strict";
import { test } from "node:test";

import { NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, withBox } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

test("a collected exec has its code and output", options, () =>
  withBox(async (box) => {
    const result = await box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert.deepEqual([result.exitCode, result.stdout, result.stderr], [3, "out\n", "err\n"]);
    assert.equal(result.timedOut, false);
  }),
);

test("exec takes cwd, env, user and stdin", options, () =>
  withBox(async (box) => {
    assert.equal((await box.exec("pwd", { cwd: "/tmp" })).stdout, "/tmp\n");
    assert.equal((await box.exec("echo $A-$B", { env: { A: "1", B: "2" } })).stdout, "1-2\n");
    assert.equal((await box.exec("id -u", { user: "root" })).stdout, "0\n");
    assert.equal((await box.exec("id -u")).stdout, "1001\n");
    assert.equal((await box.exec("cat", { stdin: "fed in" })).stdout, "fed in");
    assert.equal((await box.exec("cat", { stdin: new TextEncoder().encode("bytes in") })).stdout, "bytes in");
  }),
);

test("a command past its timeout is killed", options, () =>
  withBox(async (box) => {
    const result = await box.exec("sleep 30", { timeout: 1 });
    assert.ok(result.timedOut);
    assert.notEqual(result.exitCode, 0);
  }),
);

test("a missing program is not found", options, () =>
  withBox(async (box) => {
    await assert.rejects(box.exec(["/no/such/program"]), NotFound);
  }),
);

test("a streamed exec hands output over while the command runs", options, () =>
  withBox(async (box) => {
    // The command waits for a file that only the stdout callback makes: the exec could not
    // end if the first line were not handed over before the command's end.
    const seen = [];
    const result = await box.exec(
      "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second >&2; exit 7",
      {
        onStdout: async (text) => {
          seen.push(["out", text]);
          if (text.startsWith("first")) await box.exec("touch /tmp/go");
        },
        onStderr: (text) => seen.push(["err", text]),
        timeout: 30,
      },
    );
    assert.deepEqual(seen, [
      ["out", "first\n"],
      ["err", "second\n"],
    ]);
    assert.deepEqual([result.exitCode, result.stdout, result.stderr], [7, "first\n", "second\n"]);
    assert.equal(result.timedOut, false);
  }),
);

test("a streamed exec of a missing program rejects", options, () =>
  withBox(async (box) => {
    await assert.rejects(box.exec(["/no/such/program"], { onStdout: () => {} }), NotFound);
  }),
);

test("bad commands are refused before any call", options, () =>
  withBox(async (box) => {
    await assert.rejects(box.exec([]), TypeError);
    await assert.rejects(box.exec("true", { timeout: -1 }), TypeError);
  }),
);
