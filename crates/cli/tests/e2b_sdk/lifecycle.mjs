// The E2B npm SDK, unmodified, against berth: a sandbox's lifecycle, and its ports by host
// name. Run by crates/cli/tests/e2b_npm.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// pointing at a `berth up` whose `[ports] base_domain` is E2B_DOMAIN, and BERTH_E2B_JS naming
// the SDK's module (the pinned package under target/).
// Prints `ok <check>` for each check that passed; any failure throws (exit status 1).

import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import net from "node:net";

import { WAIT_MS, assert, ok, waitFor } from "./check.mjs";

const { Sandbox } = await import(process.env.BERTH_E2B_JS);
// The SDK's own HTTP client (a real WebSocket client among its parts), whose fetch takes
// its dispatchers (Node's built-in fetch is an older undici).
const { Agent, WebSocket, fetch } = createRequire(process.env.BERTH_E2B_JS)("undici");

const RUN = Math.random().toString(16).slice(2, 14);

// `promise`, or a failure naming `what` once the deadline has passed.
function within(what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// The app the ports proxy tests use (standard library only): /headers echoes the request's
// headers, /ws is a WebSocket echo.
const APP = new URL("../../../server/tests/api/fixtures/port_app.py", import.meta.url);
const APP_PORT = 8001;
// A sandbox's host names point at the daemon (a wildcard DNS record in a real setup): this
// client sends every connection to the daemon's address, the host name still in the URL and
// the Host header.
const daemon = new URL(process.env.E2B_API_URL);
const toDaemon = new Agent({
  connect: (_, callback) => {
    const socket = net.connect(Number(daemon.port), daemon.hostname);
    socket.once("connect", () => callback(null, socket));
    socket.once("error", (err) => callback(err, null));
  },
});

// The echo of `message` through a WebSocket to `url`, or "refused" when it does not open.
function echo(url, headers, message) {
  const ws = new WebSocket(url, { dispatcher: toDaemon, headers });
  return within(`the WebSocket at ${url}`, new Promise((resolve) => {
    ws.onopen = () => ws.send(message);
    ws.onmessage = (event) => {
      resolve(event.data);
      ws.close();
    };
    ws.onclose = () => resolve("refused");
  }));
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

const host = sbx.getHost(APP_PORT);
assert(host === `${APP_PORT}-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`, host);
await sbx.files.write("port_app.py", await readFile(APP));
const app = await sbx.commands.run(`python3 ~/port_app.py ${APP_PORT}`, {
  background: true,
  timeoutMs: 0,
});
await app.disconnect();
const token = sbx.trafficAccessToken;
assert(token, "a traffic access token");
const appUrl = `http://${host}:${daemon.port}`;
const traffic = { "e2b-traffic-access-token": token };
let seen;
// The proxy waits a while for the app to listen; a loaded machine may take longer.
await waitFor("the app's answer through its host name", async () => {
  const r = await fetch(`${appUrl}/headers`, { dispatcher: toDaemon, headers: traffic });
  seen = await r.text();
  return r.status === 200;
});
const request = JSON.parse(seen);
const sent = Object.fromEntries(request.headers);
assert(request.path === "/headers" && sent.host === `${host}:${daemon.port}`, seen);
assert(!("e2b-traffic-access-token" in sent), `the app saw the token: ${seen}`);
const stranger = await fetch(`${appUrl}/headers`, { dispatcher: toDaemon });
assert(stranger.status === 401, `no token: ${stranger.status} ${await stranger.text()}`);
const wrong = await fetch(`${appUrl}/headers`, {
  dispatcher: toDaemon,
  headers: { "e2b-traffic-access-token": "00" },
});
assert(wrong.status === 401, `a wrong token: ${wrong.status} ${await wrong.text()}`);
const wsUrl = `ws://${host}:${daemon.port}/ws`;
const echoed = await echo(wsUrl, traffic, "hello through berth");
assert(echoed === "hello through berth", echoed);
assert((await echo(wsUrl, {}, "no token")) === "refused", "a WebSocket without the token");
ok("js getHost and the traffic token");

// A loop that appends a line every 200 ms: after the resume it is the same process, still
// appending.
const ticking = await sbx.commands.run("while :; do echo tick >> ~/ticks; sleep 0.2; done", {
  background: true,
  timeoutMs: 0,
});
await ticking.disconnect();
const ticks = async (box) => (await box.files.read("ticks")).split("\n").length - 1;
await waitFor("the first tick", async () => {
  return (await sbx.files.exists("ticks")) && (await ticks(sbx)) > 0;
});
assert(await sbx.isRunning(), "running before the pause");
await sbx.pause();
assert((await Sandbox.getInfo(sbx.sandboxId)).state === "paused", "paused");
assert(!(await sbx.isRunning()), "a paused sandbox is not running");
const resumed = await Sandbox.connect(sbx.sandboxId);
assert((await resumed.getInfo()).state === "running", "running again");
assert(await resumed.isRunning(), "running after connect");
const pids = (await resumed.commands.list()).map((p) => p.pid);
assert(pids.includes(ticking.pid) && pids.includes(app.pid), `${ticking.pid} ${app.pid}: ${pids}`);
const atResume = await ticks(resumed);
await waitFor("ticks after the resume", async () => (await ticks(resumed)) > atResume + 2);
assert(resumed.trafficAccessToken === token, "connect gives the same traffic token");
const again = await echo(`ws://${resumed.getHost(APP_PORT)}:${daemon.port}/ws`, traffic, "resumed");
assert(again === "resumed", again);
ok("js pause and connect keep processes");

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
