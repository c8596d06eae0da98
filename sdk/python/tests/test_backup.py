"""A whole box as one file and back: backed up to a local file (renamed onto its name only
once whole), restored as a new box under another name with its files, refused with
`InvalidRequest` and nothing made when a byte of the file is changed, `Conflict` for a
taken name; with both clients. Against a stand-in daemon (httpx's MockTransport): a cut
backup raises and leaves no file, and a restore streams its file with its length."""

import asyncio
import re
import shutil
from pathlib import Path
from typing import List

import httpx
import pytest

from berth import (
    BackupFile,
    Berth,
    Box,
    BoxInfo,
    Conflict,
    InvalidRequest,
    NotFound,
    RestoredBackup,
    Unavailable,
)
from berth.aio import AsyncBerth, AsyncBox

from conftest import unique

NOTE = "kept across the backup"
WRITE = (
    f"printf '{NOTE}\\n' > /home/user/notes.txt && "
    "head -c 300000 /dev/urandom > /home/user/noise"
)
FILE_NAME = r"-\d{8}T\d{6}Z\.tar\.zst"
BOX = {
    "id": "bx_stand_in", "name": "stand-in", "template": "host", "state": "stopped",
    "runtime": "sandbox", "limits": {"memory_mib": 512, "pids": 256, "cpus": 1.0},
    "pause_after_s": 0, "snapshot_after_s": 0, "stop_after_s": 300, "auto_resume": True,
    "disk_mib": 1024, "created_at": "2026-12-04T00:00:00Z",
}


def only_file(directory: Path) -> Path:
    """The one file in `directory`: no temporary file was left beside it."""
    [found] = list(directory.iterdir())
    return found


def flipped(good: Path, to: Path) -> Path:
    """A copy of `good` with one byte in its middle changed."""
    shutil.copyfile(good, to)
    with open(to, "r+b") as file:
        middle = to.stat().st_size // 2
        file.seek(middle)
        byte = file.read(1)
        file.seek(middle)
        file.write(bytes([byte[0] ^ 0xFF]))
    return to


def names(client: Berth) -> List[str]:
    return sorted(b.name for b in client.boxes.list())


def delete_quietly(client: Berth, name: str) -> None:
    try:
        client.boxes.delete(name)
    except NotFound:
        pass


def test_a_box_is_backed_up_and_restored_under_another_name(client, make_box, tmp_path):
    box = make_box("bk").start()
    assert box.exec(WRITE).exit_code == 0
    box.stop()

    out = tmp_path / "out"
    out.mkdir()
    written = box.backup(out / "box.tar.zst")
    assert isinstance(written, BackupFile)
    assert written.path == out / "box.tar.zst" and only_file(out) == written.path
    assert written.bytes == written.path.stat().st_size > 300_000
    assert box.refresh().state == "stopped"

    copy = unique("bk-copy")
    try:
        restored = client.boxes.restore(written.path, name=copy)
        assert isinstance(restored, RestoredBackup) and isinstance(restored.box, Box)
        assert restored.box.name == copy and restored.box.id != box.id
        assert restored.box.state == "stopped"
        origin = restored.from_box
        assert (origin.box_id, origin.name) == (box.id, box.name)
        assert origin.created_at and origin.berth_version and origin.tenant
        assert restored.volume_bytes > 0 and restored.memory_snapshots >= 0
        assert isinstance(restored.notes, list) and restored.raw["from"]["box_id"] == box.id
        assert restored.box.exec("cat /home/user/notes.txt").stdout == NOTE + "\n"
        assert restored.box.exec("wc -c < /home/user/noise").stdout.strip() == "300000"
        assert client.boxes.get(box.name).id == box.id  # the original is untouched

        # The backed-up box's own name is taken while it exists.
        with pytest.raises(Conflict) as taken:
            client.boxes.restore(written.path)
        assert taken.value.code == "already_exists"

        before = names(client)
        damaged = flipped(written.path, tmp_path / "damaged.tar.zst")
        refused = unique("bk-damaged")
        try:
            with pytest.raises(InvalidRequest) as caught:
                client.boxes.restore(damaged, name=refused)
            assert caught.value.status == 400 and caught.value.message
            assert names(client) == before
            with pytest.raises(NotFound):
                client.boxes.get(refused)
        finally:
            delete_quietly(client, refused)
    finally:
        delete_quietly(client, copy)


def test_a_backup_of_a_missing_box_leaves_no_file(client, make_box, tmp_path):
    box = make_box("bk-gone")
    box.delete()
    with pytest.raises(NotFound):
        box.backup(tmp_path / "gone.tar.zst")
    assert list(tmp_path.iterdir()) == []


def test_the_async_client_backs_up_a_running_box_and_restores_it(tmp_path):
    async def main() -> None:
        async with AsyncBerth() as client:
            box = await client.boxes.create(unique("aio-bk"))
            copy = unique("aio-bk-copy")
            try:
                await box.start()
                assert (await box.exec(WRITE)).exit_code == 0
                # Into a directory: the file takes the daemon's name for it.
                written = await box.backup(tmp_path)
                assert re.fullmatch(re.escape(box.name) + FILE_NAME, written.path.name)
                assert only_file(tmp_path) == written.path
                assert written.bytes == written.path.stat().st_size
                assert (await box.refresh()).state == "running"

                restored = await client.boxes.restore(written.path, name=copy)
                assert isinstance(restored.box, AsyncBox) and restored.box.name == copy
                assert restored.from_box.box_id == box.id and restored.volume_bytes > 0
                result = await restored.box.exec("cat /home/user/notes.txt")
                assert result.stdout == NOTE + "\n"

                before = sorted(b.name for b in await client.boxes.list())
                damaged = flipped(written.path, tmp_path / "damaged.tar.zst")
                with pytest.raises(InvalidRequest) as caught:
                    await client.boxes.restore(damaged, name=unique("aio-bk-damaged"))
                assert caught.value.status == 400
                assert sorted(b.name for b in await client.boxes.list()) == before
            finally:
                for name in (box.name, copy):
                    try:
                        await client.boxes.delete(name)
                    except NotFound:
                        pass

    asyncio.run(main())


# Against a stand-in daemon.


class CutBody(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A backup's body that ends in a cut connection after its first chunk."""

    def __iter__(self):
        yield b"\x28\xb5\x2f\xfd" + b"x" * 100_000
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )

    async def __aiter__(self):
        for chunk in self:
            yield chunk


def cut_daemon(request: httpx.Request) -> httpx.Response:
    assert (request.method, request.url.path) == ("GET", "/v1/boxes/bx_stand_in/backup")
    headers = {
        "Content-Type": "application/zstd",
        "Content-Disposition": 'attachment; filename="stand-in-20261204T000000Z.tar.zst"',
    }
    return httpx.Response(200, headers=headers, stream=CutBody())


def test_a_cut_backup_raises_and_leaves_no_file(tmp_path):
    http = httpx.Client(base_url="http://berth.test", transport=httpx.MockTransport(cut_daemon))
    with Berth("http://berth.test", "berth_x", http=http) as client:
        box = Box(client._transport, BoxInfo.from_json(BOX))
        for dest in (tmp_path / "named.tar.zst", tmp_path):
            with pytest.raises(Unavailable, match="the backup ended before its end"):
                box.backup(dest)
            assert list(tmp_path.iterdir()) == []
        with pytest.raises(Unavailable):
            for _ in box.backup_stream():
                pass

    async def main() -> None:
        transport = httpx.MockTransport(cut_daemon)
        http = httpx.AsyncClient(base_url="http://berth.test", transport=transport)
        async with AsyncBerth("http://berth.test", "berth_x", http=http) as client:
            box = AsyncBox(client._transport, BoxInfo.from_json(BOX))
            with pytest.raises(Unavailable):
                await box.backup(tmp_path)
            assert list(tmp_path.iterdir()) == []
            with pytest.raises(Unavailable):
                async for _ in box.backup_stream():
                    pass

    asyncio.run(main())


def test_a_restore_streams_its_file_with_its_length(tmp_path):
    archive = tmp_path / "box.tar.zst"
    archive.write_bytes(bytes(range(256)) * 10_000)
    seen = []

    def daemon(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, dict(request.url.params), request.headers,
                     request.content))
        answer = {
            "box": BOX,
            "from": {"box_id": "bx_old", "name": "old", "tenant": "default",
                     "created_at": "2026-12-04T00:00:00Z", "berth_version": "0.1.0"},
            "volume_bytes": 42, "memory_snapshots": 2, "notes": ["a note"],
        }
        return httpx.Response(201, json=answer)

    http = httpx.Client(base_url="http://berth.test", transport=httpx.MockTransport(daemon))
    with Berth("http://berth.test", "berth_x", http=http) as client:
        restored = client.boxes.restore(archive, name="copy", runtime="sandbox")
    assert restored.box.id == "bx_stand_in" and restored.from_box.name == "old"
    assert (restored.volume_bytes, restored.memory_snapshots, restored.notes) == (
        42, 2, ["a note"]
    )
    [(path, params, headers, body)] = seen
    assert path == "/v1/backups/restore" and params == {"name": "copy", "runtime": "sandbox"}
    assert headers["content-type"] == "application/zstd"
    assert headers["content-length"] == str(archive.stat().st_size)
    assert "transfer-encoding" not in headers and body == archive.read_bytes()
