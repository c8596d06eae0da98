// The E2B npm SDK, unmodified, against berth: `sandbox.pty` (envd's process.Process with a
// terminal). Run by crates/cli/tests/e2b_npm.rs with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY pointing at a `berth up`, and BERTH_E2B_JS naming the SDK's module.
// Prints `ok <check>` for each check that passed and `box <sandbox id>`; any failure throws
// (exit status 1). A terminal echoes its input, so each command prints a marker the input
// itself does not contain (`$((1+1))` is echoed as typed, printed as 2).

import { WAIT_MS, assert, ok, rejectsWith, show } from "./check.mjs";

const { Sandbox, CommandExitError } = await import(process.env.BERTH_E2B_JS);

const input = (text) => new TextEncoder().encode(text);

// What a terminal printed so far, decoded as it comes.
class Screen {
  text = "";
  #decoder = new TextDecoder();
  onData = (data) => {
    this.text += this.#decoder.decode(data, { stream: true });
  };

  async waitFor(marker) {
    const deadline = Date.now() + WAIT_MS;
    while (!this.text.includes(marker)) {
      if (Date.now() > deadline) throw new Error(`no ${show(marker)} in ${show(this.text)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const exitError = (promise) => rejectsWith(CommandExitError, promise);

const sbx = await Sandbox.create({ timeoutMs: 300_000 });
console.log(`box ${sbx.sandboxId}`);
try {
  const screen = new Screen();
  // No stream deadline: the terminal lives until it is killed below.
  const handle = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: screen.onData,
    cwd: "/tmp",
    envs: { PTY_VAR: "set" },
    timeoutMs: 0,
  });
  assert(handle.pid > 0, handle.pid);
  await sbx.pty.sendInput(handle.pid, input("echo SIZE=$(stty size)=$((1+1))\n"));
  await screen.waitFor("SIZE=24 80=2");
  await sbx.pty.sendInput(handle.pid, input("echo AT=$(pwd):$PTY_VAR:$TERM=$((1+2))\n"));
  await screen.waitFor("AT=/tmp:set:xterm-256color=3");
  ok("js pty create with onData and sendInput");

  const shown = (await sbx.commands.list()).filter((p) => p.pid === handle.pid);
  assert(shown.length === 1 && show(shown[0].args) === show(["-i", "-l"]), show(shown));
  ok("js pty listed");

  await sbx.pty.resize(handle.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(handle.pid, input("echo SIZE=$(stty size)=$((2+2))\n"));
  await screen.waitFor("SIZE=30 100=4");
  ok("js pty resize");

  await handle.disconnect();
  const later = new Screen();
  const again = await sbx.pty.connect(handle.pid, { onData: later.onData, timeoutMs: 0 });
  assert(again.pid === handle.pid, `${again.pid} != ${handle.pid}`);
  await sbx.pty.sendInput(handle.pid, input("echo AGAIN=$((3+3))\n"));
  await later.waitFor("AGAIN=6");
  assert(!screen.text.includes("AGAIN=6"), "the disconnected handle saw no more output");
  ok("js pty connect");

  assert((await sbx.pty.kill(handle.pid)) === true, "kill answers true");
  const killed = await exitError(again.wait());
  assert(killed.exitCode === -1, show(killed));
  assert((await sbx.pty.kill(handle.pid)) === false, "a dead PTY's kill answers false");
  assert((await sbx.commands.list()).every((p) => p.pid !== handle.pid), "gone from the list");
  ok("js pty kill");

  const exiting = new Screen();
  const shell = await sbx.pty.create({ cols: 80, rows: 24, onData: exiting.onData, timeoutMs: 0 });
  await sbx.pty.sendInput(shell.pid, input("exit 5\n"));
  const exited = await exitError(shell.wait());
  assert(exited.exitCode === 5 && exited.error === "exit status 5", show(exited));
  assert((await sbx.commands.list()).every((p) => p.pid !== shell.pid), "an exited PTY is gone");
  ok("js pty exit code");
} finally {
  await sbx.kill();
}
ok("done");
