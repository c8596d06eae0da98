"""The E2B Python SDK, unmodified, against berth: a sandbox's lifecycle with the sync
`Sandbox` and the async `AsyncSandbox`. Run by crates/cli/tests/e2b_sdk.rs with
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at a `berth up`.

Prints `ok <check>` for each check that passed, and `box <kind> <sandbox id>` for the
sandboxes whose berth boxes the Rust test looks at; any failure raises (exit status 1).
"""

import asyncio
import os
import pathlib
import sys
import time
import urllib.parse
import uuid

import httpx
from e2b import (
    AsyncSandbox,
    FileNotFoundException,
    Sandbox,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)

RUN = uuid.uuid4().hex[:12]
# The E2B template the sandboxes are made from: `base` (berth's default template) unless
# the test names another (the qemu run names `debian`, which has bash and python3).
TEMPLATE = os.environ.get("BERTH_E2B_TEMPLATE", "base")
# The ports proxy's test app (HTTP; standard library only), run in the sandbox.
APP = pathlib.Path(__file__).parents[3] / "server/tests/api/fixtures/port_app.py"
APP_PORT = 8001
# Where the daemon listens: host names under E2B_DOMAIN resolve nowhere here, so requests
# to them go to this address with the name as their Host.
DAEMON = urllib.parse.urlsplit(os.environ["E2B_API_URL"]).netloc
# Long enough for a loaded machine; each wait polls, and fails only past it.
WAIT_S = 90


def ok(check):
    print(f"ok {check}", flush=True)


def wait_for(what, condition):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def gone(sandbox_id):
    try:
        Sandbox.get_info(sandbox_id)
        return False
    except SandboxNotFoundException:
        return True


def lifetime_s(info):
    return (info.end_at - info.started_at).total_seconds()


def sync_suite():
    meta = {"run": RUN, "kind": "sync"}
    sbx = Sandbox.create(
        template=TEMPLATE, timeout=120, metadata=meta, envs={"GREETING": "hello from e2b"}
    )
    print(f"box sync {sbx.sandbox_id}", flush=True)
    assert len(sbx.sandbox_id) == 20, sbx.sandbox_id
    ok("sync create")

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id, info
    assert info.metadata == meta, info.metadata
    assert info.state == SandboxState.RUNNING, info.state
    assert info.envd_version == "0.5.7", info.envd_version
    assert info.template_id == TEMPLATE, info.template_id
    assert 115 <= lifetime_s(info) <= 125, info
    ok("sync get_info")

    other = Sandbox.create(
        template=TEMPLATE, timeout=120, metadata={"run": RUN, "kind": "other"}
    )
    found = Sandbox.list(query=SandboxQuery(metadata=meta)).next_items()
    assert [s.sandbox_id for s in found] == [sbx.sandbox_id], found
    everything = Sandbox.list(query=SandboxQuery(metadata={"run": RUN}), limit=1)
    ids = []
    while everything.has_next:
        ids += [s.sandbox_id for s in everything.next_items()]
    assert sorted(ids) == sorted([sbx.sandbox_id, other.sandbox_id]), ids
    ok("sync list by metadata")

    before = sbx.get_info().end_at
    sbx.set_timeout(600)
    after = sbx.get_info().end_at
    assert (after - before).total_seconds() > 400, (before, after)
    ok("sync set_timeout")

    metrics = sbx.get_metrics()
    assert len(metrics) == 1 and metrics[0].mem_total > 0, metrics
    ok("sync metrics")

    host = sbx.get_host(APP_PORT)
    assert host == f"{APP_PORT}-{sbx.sandbox_id}.{os.environ['E2B_DOMAIN']}", host
    sbx.files.write("/home/user/port_app.py", APP.read_bytes())
    app = sbx.commands.run(f"python3 /home/user/port_app.py {APP_PORT}", background=True)
    traffic = {"host": host, "e2b-traffic-access-token": sbx.traffic_access_token}

    def app_answers():
        try:
            return httpx.get(f"http://{DAEMON}/headers", headers=traffic).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the app by its host name", app_answers)
    seen = httpx.get(f"http://{DAEMON}/headers", headers=traffic).json()
    assert seen["path"] == "/headers", seen
    assert "e2b-traffic-access-token" not in {k.lower() for k, _ in seen["headers"]}, seen
    refused = httpx.get(f"http://{DAEMON}/headers", headers={"host": host})
    assert refused.status_code == 401, (refused.status_code, refused.text)
    ok("sync get_host")

    # A loop appending a line every 200 ms: after the pause and the connect it is the same
    # process, still appending, and the app still answers.
    loop = sbx.commands.run(
        "while true; do echo tick >> /home/user/ticks; sleep 0.2; done", background=True
    )

    def ticks():
        try:
            return len(sbx.files.read("/home/user/ticks").splitlines())
        except FileNotFoundException:
            return 0  # the loop has not written yet

    wait_for("the loop's first lines", lambda: ticks() > 0)
    assert sbx.pause() is True
    assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
    assert sbx.pause() is False, "already paused"
    paused = Sandbox.list(
        query=SandboxQuery(metadata=meta, state=[SandboxState.PAUSED])
    ).next_items()
    assert [s.sandbox_id for s in paused] == [sbx.sandbox_id], paused
    ok("sync pause")

    again = Sandbox.connect(sbx.sandbox_id, timeout=120)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.get_info().state == SandboxState.RUNNING
    ok("sync connect resumes")

    running = {p.pid for p in again.commands.list()}
    assert {loop.pid, app.pid} <= running, (loop.pid, app.pid, running)
    counted = ticks()
    wait_for("the loop to go on after the resume", lambda: ticks() > counted)
    assert app_answers(), "the app answers after the resume"
    ok("sync connect keeps processes")

    short = Sandbox.create(template=TEMPLATE, timeout=2, metadata={"run": RUN, "kind": "short"})
    wait_for("the short sandbox to be killed", lambda: gone(short.sandbox_id))
    ok("sync killed at timeout")

    assert other.kill() is True
    assert sbx.kill() is True
    assert gone(sbx.sandbox_id)
    assert Sandbox.kill(sbx.sandbox_id) is False, "a second kill finds nothing"
    ok("sync kill")


async def async_gone(sandbox_id):
    try:
        await AsyncSandbox.get_info(sandbox_id)
        return False
    except SandboxNotFoundException:
        return True


async def async_wait_for(what, condition):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def async_suite():
    meta = {"run": RUN, "kind": "async"}
    sbx = await AsyncSandbox.create(
        template=TEMPLATE,
        timeout=120, metadata=meta, envs={"GREETING": "hello from async"}
    )
    print(f"box async {sbx.sandbox_id}", flush=True)
    ok("async create")

    info = await sbx.get_info()
    assert info.metadata == meta and info.state == SandboxState.RUNNING, info
    ok("async get_info")

    found = await AsyncSandbox.list(query=SandboxQuery(metadata=meta)).next_items()
    assert [s.sandbox_id for s in found] == [sbx.sandbox_id], found
    ok("async list by metadata")

    await sbx.set_timeout(30)
    info = await sbx.get_info()
    left = (info.end_at - info.started_at).total_seconds()
    assert left < 100, info
    ok("async set_timeout")

    assert await sbx.pause() is True
    assert (await sbx.get_info()).state == SandboxState.PAUSED
    again = await AsyncSandbox.connect(sbx.sandbox_id, timeout=120)
    assert (await again.get_info()).state == SandboxState.RUNNING
    ok("async pause and connect")

    # On timeout, an auto-pausing sandbox is paused, and connect brings it back.
    napper = await AsyncSandbox.create(
        template=TEMPLATE,
        timeout=2, metadata={"run": RUN, "kind": "napper"}, lifecycle={"on_timeout": "pause"}
    )

    async def napping():
        return (await AsyncSandbox.get_info(napper.sandbox_id)).state == SandboxState.PAUSED

    await async_wait_for("the auto-pausing sandbox to pause", napping)
    woken = await AsyncSandbox.connect(napper.sandbox_id, timeout=60)
    assert (await woken.get_info()).state == SandboxState.RUNNING
    ok("async auto-pause at timeout")

    short = await AsyncSandbox.create(
        template=TEMPLATE, timeout=2, metadata={"run": RUN, "kind": "short"}
    )

    async def short_gone():
        return await async_gone(short.sandbox_id)

    await async_wait_for("the short sandbox to be killed", short_gone)
    ok("async killed at timeout")

    assert await woken.kill() is True
    assert await sbx.kill() is True
    assert await async_gone(sbx.sandbox_id)
    ok("async kill")


def main():
    sync_suite()
    asyncio.run(async_suite())
    # Left running for the Rust test, which looks at its berth box.
    kept = Sandbox.create(template=TEMPLATE, timeout=600, envs={"GREETING": "hello from e2b"})
    print(f"box kept {kept.sandbox_id}", flush=True)
    ok("done")


if __name__ == "__main__":
    main()
    # Every check is done and printed. The pinned SDK's native HTTP client (pyqwest) can
    # abort in the interpreter's teardown after streaming calls ("Fatal Python error:
    # Aborted", no Python frame); leave without it.
    sys.stdout.flush()
    os._exit(0)
