"""The E2B Python SDK, unmodified, against berth: a sandbox's lifecycle with the sync
`Sandbox` and the async `AsyncSandbox`. Run by crates/cli/tests/e2b_sdk.rs with
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at a `berth up`.

Prints `ok <check>` for each check that passed, and `box <kind> <sandbox id>` for the
sandboxes whose berth boxes the Rust test looks at; any failure raises (exit status 1).
"""

import asyncio
import os
import sys
import time
import uuid

from e2b import (
    AsyncSandbox,
    Sandbox,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)

RUN = uuid.uuid4().hex[:12]
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
    sbx = Sandbox.create(timeout=120, metadata=meta, envs={"GREETING": "hello from e2b"})
    print(f"box sync {sbx.sandbox_id}", flush=True)
    assert len(sbx.sandbox_id) == 20, sbx.sandbox_id
    ok("sync create")

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id, info
    assert info.metadata == meta, info.metadata
    assert info.state == SandboxState.RUNNING, info.state
    assert info.envd_version == "0.5.7", info.envd_version
    assert info.template_id == "base", info.template_id
    assert 115 <= lifetime_s(info) <= 125, info
    ok("sync get_info")

    other = Sandbox.create(timeout=120, metadata={"run": RUN, "kind": "other"})
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

    short = Sandbox.create(timeout=2, metadata={"run": RUN, "kind": "short"})
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
        timeout=2, metadata={"run": RUN, "kind": "napper"}, lifecycle={"on_timeout": "pause"}
    )

    async def napping():
        return (await AsyncSandbox.get_info(napper.sandbox_id)).state == SandboxState.PAUSED

    await async_wait_for("the auto-pausing sandbox to pause", napping)
    woken = await AsyncSandbox.connect(napper.sandbox_id, timeout=60)
    assert (await woken.get_info()).state == SandboxState.RUNNING
    ok("async auto-pause at timeout")

    short = await AsyncSandbox.create(timeout=2, metadata={"run": RUN, "kind": "short"})

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
    kept = Sandbox.create(timeout=600, envs={"GREETING": "hello from e2b"})
    print(f"box kept {kept.sandbox_id}", flush=True)
    ok("done")


if __name__ == "__main__":
    main()
    # Every check is done and printed. The pinned SDK's native HTTP client (pyqwest) can
    # abort in the interpreter's teardown after streaming calls ("Fatal Python error:
    # Aborted", no Python frame); leave without it.
    sys.stdout.flush()
    os._exit(0)
