// The E2B npm SDK, unmodified, against berth: a sandbox's lifecycle. Run by
// crates/cli/tests/e2b_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at a
// `berth up`, and BERTH_E2B_JS naming the SDK's module (the pinned package under target/).
// Prints `ok <check>` for each check that passed; any failure throws (exit status 1).

const { Sandbox } = await import(process.env.BERTH_E2B_JS);

const RUN = Math.random().toString(16).slice(2, 14);
// Long enough for a loaded machine; each wait polls, and fails only past it.
const WAIT_MS = 90_000;

const ok = (check) => console.log(`ok ${check}`);
const assert = (cond, what) => {
  if (!cond) throw new Error(`assertion failed: ${what}`);
};

async function waitFor(what, condition) {
  const deadline = Date.now() + WAIT_MS;
  while (Date.now() < deadline) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const metadata = { run: RUN, kind: "js" };
const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata, envs: { GREETING: "hi from js" } });
assert(sbx.sandboxId.length === 20, sbx.sandboxId);
ok("js create");

const info = await sbx.getInfo();
assert(info.sandboxId === sbx.sandboxId, JSON.stringify(info));
assert(info.metadata.run === RUN && info.metadata.kind === "js", JSON.stringify(info.metadata));
assert(info.state === "running", info.state);
ok("js getInfo");

const paginator = Sandbox.list({ query: { metadata: { run: RUN } } });
const listed = await paginator.nextItems();
assert(listed.length === 1 && listed[0].sandboxId === sbx.sandboxId, JSON.stringify(listed));
ok("js list by metadata");

await sbx.setTimeout(300_000);
const later = await sbx.getInfo();
const lifetimeS = (later.endAt - later.startedAt) / 1000;
assert(lifetimeS > 250, `lifetime ${lifetimeS}`);
ok("js setTimeout");

assert(await sbx.isRunning(), "running before the pause");
await sbx.pause();
assert((await Sandbox.getInfo(sbx.sandboxId)).state === "paused", "paused");
assert(!(await sbx.isRunning()), "a paused sandbox is not running");
const resumed = await Sandbox.connect(sbx.sandboxId);
assert((await resumed.getInfo()).state === "running", "running again");
assert(await resumed.isRunning(), "running after connect");
ok("js pause and connect");

const short = await Sandbox.create({ timeoutMs: 3_000, metadata });
await waitFor("the kill at the timeout", async () => {
  try {
    await Sandbox.getInfo(short.sandboxId);
    return false;
  } catch (e) {
    return e.name === "SandboxNotFoundError" || /not found/i.test(String(e));
  }
});
ok("js killed at timeout");

assert(await resumed.kill(), "kill answers true");
assert(!(await resumed.isRunning()), "a killed sandbox is not running");
ok("js kill");
ok("done");
