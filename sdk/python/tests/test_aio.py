"""The asyncio client (`berth.aio`) on real boxes: the same surface as the blocking one,
each call awaited and each stream an async iterator. Every test makes its boxes with the
async client and deletes them, whether it passed or not."""

import asyncio
import os
from typing import Awaitable, Callable

import pytest

from berth import Conflict, NotFound
from berth.aio import AsyncBerth, AsyncBox

from conftest import unique


def with_box(body: Callable[[AsyncBox], Awaitable[None]], **fields) -> None:
    """Runs `body` with a new box of `fields`, deleted after."""

    async def main() -> None:
        async with AsyncBerth() as client:
            box = await client.boxes.create(unique("aio"), **fields)
            try:
                await body(box)
            finally:
                await box.delete()
                with pytest.raises(NotFound):
                    await client.boxes.get(box.id)

    asyncio.run(main())


def test_boxes_and_exec():
    async def body(box: AsyncBox) -> None:
        assert box.state == "stopped"
        assert (await box.start()).state == "running"
        result = await box.exec("echo out; echo err >&2; exit 3", env={"A": "1"})
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        seen = []
        streamed = await box.exec("for i in 1 2 3; do echo line$i; done", on_stdout=seen.append)
        assert "".join(seen) == streamed.stdout == "line1\nline2\nline3\n"
        await box.update(labels={"kind": "aio"})
        assert box.info.labels == {"kind": "aio"}
        async with AsyncBerth() as client:
            listed = await client.boxes.list(labels={"kind": "aio"})
            assert box.id in [b.id for b in listed]
        assert (await box.stop()).state == "stopped"

    with_box(body)


def test_a_background_process_resumes_its_output():
    async def body(box: AsyncBox) -> None:
        process = await box.spawn("cat; echo done", open_stdin=True)
        await process.write_stdin("first\n")
        first = []
        async for chunk in process.output():
            first.append(chunk.data)
            if b"first" in b"".join(first):
                break  # left early: the next output() goes on from here
        await process.write_stdin(b"second\n", close=True)
        rest = b""
        async for chunk in process.output():
            rest += chunk.data
        assert b"".join(first) + rest == b"first\nsecond\ndone\n"
        assert process.exit is not None and process.exit.code == 0
        assert process.id in [p.id for p in await box.processes()]
        sleeper = await box.spawn(["sleep", "600"])
        await sleeper.kill()
        assert (await sleeper.wait()).signal == 9

    with_box(body)


def test_files_both_ways_a_directory_and_a_watch(tmp_path):
    async def body(box: AsyncBox) -> None:
        files = box.files
        await files.mkdir("/tmp/w", recursive=True)
        seen = []

        async def watch() -> None:
            async for event in files.watch("/tmp/w"):
                seen.append(event)

        watching = asyncio.ensure_future(watch())
        # The watch is on once a change shows: probe until one does.
        probes = 0
        while not seen:
            assert probes < 600, "the watch never saw a probe"
            await files.write(f"/tmp/w/probe-{probes}", b"")
            probes += 1
            await asyncio.sleep(0.05)

        async def chunks():
            for i in range(3):
                yield bytes([65 + i]) * 50000

        await files.write("/tmp/w/big", chunks())
        assert (await files.read("/tmp/w/big")) == b"A" * 50000 + b"B" * 50000 + b"C" * 50000
        streamed = b"".join([c async for c in files.read_stream("/tmp/w/big")])
        assert len(streamed) == 150000
        # berth's own writes land by a rename onto the name.
        def landed() -> bool:
            return any("big" in (e.path, e.to) for e in seen)

        for _ in range(600):
            if landed():
                break
            await asyncio.sleep(0.05)
        assert landed(), seen
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching
        for probe in range(probes):
            await files.remove(f"/tmp/w/probe-{probe}")

        await files.write("/tmp/w/t.txt", "text")
        assert await files.read_text("/tmp/w/t.txt") == "text"
        assert {e.name for e in await files.list("/tmp/w")} == {"big", "t.txt"}
        assert (await files.stat("/tmp/w/t.txt")).size == 4
        with pytest.raises(Conflict):
            await files.remove("/tmp/w")
        await files.remove("/tmp/w", recursive=True)
        assert not await files.exists("/tmp/w")

        local = tmp_path / "up"
        (local / "sub").mkdir(parents=True)
        (local / "sub" / "a.txt").write_text("a")
        os.symlink("sub/a.txt", local / "link")
        written = await files.upload_dir(local, "/tmp/up")
        assert written.files == 1 and written.links == 1
        await files.download_dir("/tmp/up", tmp_path / "down")
        assert (tmp_path / "down" / "sub" / "a.txt").read_text() == "a"
        assert os.readlink(tmp_path / "down" / "link") == "sub/a.txt"

    with_box(body)


def test_a_terminal_round_trip():
    async def body(box: AsyncBox) -> None:
        terminal = await box.terminal(100, 30, cmd=["sh"])

        async def read_until(needle: bytes) -> bytes:
            seen = b""
            async for chunk in terminal.read():
                seen += chunk
                if needle in seen:
                    return seen
            raise AssertionError(f"the terminal ended before {needle!r}: {seen!r}")

        await terminal.write("stty size; echo ma''rk-$((6*7))\n")
        assert b"30 100" in await read_until(b"mark-42")
        await terminal.resize(120, 40)
        await terminal.write("stty size; exit 4\n")
        assert b"40 120" in await read_until(b"40 120")
        async for _ in terminal.read():
            pass
        assert terminal.exit_code == 4

    with_box(body)


def test_a_turn_streams_to_its_result_and_share_links():
    async def body(box: AsyncBox) -> None:
        turn = await box.send("hello async")
        kinds = [e.type async for e in turn]
        assert kinds[-1] == "result" and turn.text == "echo: hello async", kinds
        assert (await box.last_event_seq()) >= turn.result.seq
        link = await box.share(8000, ttl_s=60)
        assert link.url and link.id in [l.id for l in await box.links(port=8000)]
        with pytest.raises(NotFound):
            await box.revoke(link.id, port=8001)
        assert (await box.revoke(link.id, port=8000)).state == "revoked"
        assert [l.state for l in await box.links()] == ["revoked"]

    with_box(body, template="echo")


def test_the_daemon_tenants_secrets_webhooks_and_web():
    async def main() -> None:
        async with AsyncBerth() as client:
            assert (await client.health()).status == "ok"
            assert any(r.default for r in await client.runtimes())
            assert "echo" in [t.name for t in await client.templates.list()]
            assert (await client.templates.reload()).errors == []

            tenant = await client.tenants.create(unique("aio-tn"), max_boxes=1)
            try:
                assert tenant.api_key and tenant.id in [t.id for t in await client.tenants.list()]
                await tenant.update(max_boxes=2)
                assert (await client.tenants.get(tenant.name)).quota.max_boxes == 2
                assert (await tenant.refresh()).quota.max_boxes == 2
                key = await tenant.keys.create()
                assert key.id in [k.id for k in await tenant.keys.list()]
            finally:  # a tenant is never deleted: none of its keys is left able to call
                for made in await tenant.keys.list():
                    assert await tenant.keys.revoke(made.id) == 0

            name = unique("aio-secret")
            assert (await client.secrets.set(name, "v")).created
            try:
                assert name in [s.name for s in await client.secrets.list()]
            finally:
                await client.secrets.delete(name)

            hook = await client.webhooks.create("https://hooks.example.invalid/in",
                                                events=["process.exited"])
            try:
                assert hook.secret and (await client.webhooks.get(hook.id)).url == hook.url
                assert hook.id in [w.id for w in await client.webhooks.list()]
                delivery = await hook.test()
                assert not delivery.delivered and delivery.last_error
                assert [d.id for d in await hook.deliveries()] == [delivery.id]
            finally:
                await client.webhooks.delete(hook.id)

            pairing = await client.web.pair()
            assert pairing.code.startswith("bwp_")
            sessions = await client.web.sessions()
            with pytest.raises(NotFound):
                await client.web.revoke("ws_" + "0" * 24)
            assert all(s.id.startswith("ws_") for s in sessions)

    asyncio.run(main())


def test_wakeups_messages_egress_and_a_port():
    async def body(box: AsyncBox) -> None:
        wakeup = await box.wakeups.create("later", in_s=3600)
        assert [w.id for w in await box.wakeups.list()] == [wakeup.id]
        assert (await box.wakeups.delete(wakeup.id)).id == wakeup.id
        turn = await box.send("hi there")
        assert turn.events_after >= 0 and (await turn.wait()).type == "result"
        assert [m.content for m in await box.messages()] == ["hi there"]
        assert (await box.egress_audit(limit=1)).next == 0

        await box.spawn("cd /tmp && echo served > f && exec python3 -m http.server 8001")
        for _ in range(600):
            answer = await box.fetch(8001, "f")
            if answer.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert answer.text == "served\n"

    with_box(body, template="echo")


def test_memory_read_awake_and_asleep():
    async def body(box: AsyncBox) -> None:
        await box.exec(
            "mkdir -p /memory/entities && printf 'Alice likes tea.\\n' > /memory/entities/alice.md"
        )
        awake = await box.memory.tree("entities")
        # entities/README.md is the seeded layout's.
        assert awake.source == "box" and [e.path for e in awake.entries] == [
            "entities/README.md",
            "entities/alice.md",
        ]
        assert (await box.stop()).state == "stopped"
        asleep = await box.memory.tree()
        assert asleep.source == "volume" and "entities/alice.md" in [e.path for e in asleep.entries]
        assert await box.memory.read("entities/alice.md") == b"Alice likes tea.\n"
        assert await box.memory.read_text("entities/alice.md") == "Alice likes tea.\n"
        with pytest.raises(NotFound):
            await box.memory.read("entities/bob.md")
        assert (await box.refresh()).state == "stopped"

    with_box(body)


def test_services_listed_asleep_then_restarted_and_read_awake():
    async def body(box: AsyncBox) -> None:
        assert [(s.name, s.state) for s in await box.services()] == [("hello", "stopped")]
        # The restart wakes the box (whose boot started the service) and restarts it.
        restarted = await box.restart_service("hello")
        assert restarted.name == "hello" and restarted.restarts >= 1
        assert (await box.refresh()).state == "running"
        text = ""
        for _ in range(600):
            text = "".join([chunk.text async for chunk in box.service_logs("hello")])
            if "hello\n" in text:
                break
            await asyncio.sleep(0.05)
        assert "hello\n" in text, text

    with_box(body, template="svc")
