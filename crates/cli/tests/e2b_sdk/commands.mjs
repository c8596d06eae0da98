// The E2B npm SDK, unmodified, against berth: `sandbox.commands` (envd's process.Process).
// Run by crates/cli/tests/e2b_npm.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// pointing at a `berth up`, and BERTH_E2B_JS naming the SDK's module.
// Prints `ok <check>` for each check that passed and `box <sandbox id>`; any failure throws
// (exit status 1).

import { WAIT_MS, assert, ok, rejectsWith, same, show } from "./check.mjs";

const { Sandbox, CommandExitError } = await import(process.env.BERTH_E2B_JS);

const exitError = (promise) => rejectsWith(CommandExitError, promise);

function listed(processes, pid) {
  const found = processes.filter((p) => p.pid === pid);
  assert(found.length === 1, `${pid} once in ${show(processes)}`);
  return found[0];
}

const sbx = await Sandbox.create({ timeoutMs: 300_000, envs: { GREETING: "hello" } });
console.log(`box ${sbx.sandboxId}`);
try {
  const result = await sbx.commands.run("echo out; echo err >&2");
  const { stdout: out, stderr: err, exitCode } = result;
  assert(same([out, err, exitCode], ["out\n", "err\n", 0]), show(result));
  ok("js run");

  let failed = await exitError(sbx.commands.run("echo partial; echo bad >&2; exit 3"));
  const expected = [3, "partial\n", "bad\n"];
  assert(same([failed.exitCode, failed.stdout, failed.stderr], expected), show(failed));
  assert(failed.error === "exit status 3" && failed.message === "exit status 3", failed.error);
  ok("js non-zero exit throws CommandExitError");

  const stdout = [];
  const stderr = [];
  const lines = await sbx.commands.run("for i in 1 2 3; do echo line$i; echo e$i >&2; done", {
    onStdout: (data) => stdout.push(data),
    onStderr: (data) => stderr.push(data),
  });
  assert(stdout.join("") === "line1\nline2\nline3\n", show(stdout));
  assert(stderr.join("") === "e1\ne2\ne3\n", show(stderr));
  assert(lines.stdout === stdout.join("") && lines.stderr === stderr.join(""), show(lines));
  ok("js onStdout and onStderr");

  const envs = await sbx.commands.run("echo $OWN $GREETING", { envs: { OWN: "mine" } });
  assert(envs.stdout === "mine hello\n", show(envs));
  ok("js envs");

  assert((await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout === "/tmp\n", "cwd /tmp");
  assert((await sbx.commands.run("pwd")).stdout === "/home/user\n", "the user's home by default");
  ok("js cwd");

  assert((await sbx.commands.run("whoami")).stdout === "user\n", "user by default");
  assert((await sbx.commands.run("whoami", { user: "root" })).stdout === "root\n", "root");
  ok("js user");

  let handle = await sbx.commands.run("sleep 1; echo done", { background: true });
  assert(handle.pid > 0, handle.pid);
  assert((await handle.wait()).stdout === "done\n", handle.stdout);
  failed = await exitError(
    (await sbx.commands.run("sleep 1; exit 4", { background: true })).wait(),
  );
  assert(failed.exitCode === 4, show(failed));
  ok("js background wait");

  handle = await sbx.commands.run("read a; echo got:$a; cat", { background: true, stdin: true });
  await handle.sendStdin("hello\n");
  await sbx.commands.sendStdin(handle.pid, new TextEncoder().encode("more\n"));
  await handle.closeStdin();
  const piped = await handle.wait();
  assert(piped.stdout === "got:hello\nmore\n", show(piped));
  ok("js stdin");

  // No stream deadline: this one is killed below, not timed out.
  handle = await sbx.commands.run("sleep 600", {
    background: true,
    envs: { LISTED: "yes" },
    cwd: "/tmp",
    timeoutMs: 0,
  });
  const info = listed(await sbx.commands.list(), handle.pid);
  assert(same([info.cmd, info.args], ["/bin/bash", ["-l", "-c", "sleep 600"]]), show(info));
  assert(info.cwd === "/tmp" && info.envs.LISTED === "yes", show(info));
  ok("js list");

  assert((await handle.kill()) === true, "kill answers true");
  failed = await exitError(handle.wait());
  assert(failed.exitCode === -1 && failed.error === "signal: killed", show(failed));
  assert((await sbx.commands.kill(handle.pid)) === false, "a dead pid's kill answers false");
  assert((await sbx.commands.list()).every((p) => p.pid !== handle.pid), "gone from the list");
  ok("js kill");

  handle = await sbx.commands.run("echo first; read x; echo second:$x", {
    background: true,
    stdin: true,
  });
  // The first line is out before the disconnect, so the connect has to bring it back.
  const deadline = Date.now() + WAIT_MS;
  while (handle.stdout !== "first\n") {
    assert(Date.now() < deadline, `the first line, got ${show(handle.stdout)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await handle.disconnect();
  const seen = [];
  const again = await sbx.commands.connect(handle.pid, { onStdout: (data) => seen.push(data) });
  assert(again.pid === handle.pid, `${again.pid} != ${handle.pid}`);
  await sbx.commands.sendStdin(handle.pid, "later\n");
  const connected = await again.wait();
  assert(connected.stdout === "first\nsecond:later\n", show(connected));
  assert(seen.join("") === connected.stdout, show(seen));
  ok("js connect");
} finally {
  await sbx.kill();
}
ok("done");
