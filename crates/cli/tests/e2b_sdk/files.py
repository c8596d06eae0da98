"""The E2B Python SDK, unmodified, against berth: a sandbox's `files` with the sync
`Sandbox` and the async `AsyncSandbox` (envd's `filesystem.Filesystem` and `/files`, served
by berth on its own file operations). Run by crates/cli/tests/e2b_sdk.rs with E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY pointing at a `berth up`.

Prints `ok <check>` for each check that passed; any failure raises (exit status 1).
"""

import asyncio
import os
import sys
import io
import time
import urllib.parse

import httpx

from e2b import AsyncSandbox, FilesystemEventType, FileType, Sandbox
from e2b.sandbox.filesystem.filesystem import WriteEntry

# The E2B template the sandboxes are made from: `base` (berth's default template) unless
# the test names another (the qemu run names `debian`, which has bash).
TEMPLATE = os.environ.get("BERTH_E2B_TEMPLATE", "base")

# Long enough for a loaded machine; each wait polls, and fails only past it.
WAIT_S = 60


def ok(check):
    print(f"ok {check}", flush=True)


def sync_files():
    sbx = Sandbox.create(template=TEMPLATE, timeout=300)
    try:
        files = sbx.files
        info = files.write("notes/hello.txt", "hello berth\n")
        assert info.path == "/home/user/notes/hello.txt", info
        assert info.type == FileType.FILE, info
        files.write("/home/user/notes/raw.bin", bytes(range(256)) * 64)
        written = files.write_files(
            [
                WriteEntry(path="/home/user/many/a.txt", data="A"),
                WriteEntry(path="/home/user/many/b.txt", data=b"B"),
            ]
        )
        assert [w.path for w in written] == ["/home/user/many/a.txt", "/home/user/many/b.txt"], written
        files.write("/home/user/notes/streamed.txt", io.BytesIO(b"from a stream"))
        ok("sync write str, bytes, a list and a stream")

        assert files.read("notes/hello.txt") == "hello berth\n"
        assert files.read("~/notes/raw.bin", format="bytes") == bytearray(bytes(range(256)) * 64)
        streamed = b"".join(files.read("/home/user/notes/raw.bin", format="stream"))
        assert streamed == bytes(range(256)) * 64
        assert files.read("/home/user/notes/hello.txt", gzip=True) == "hello berth\n"
        ok("sync read text, bytes, stream and gzip")

        top = files.list("/home/user/notes")
        assert sorted(e.name for e in top) == ["hello.txt", "raw.bin", "streamed.txt"], top
        files.make_dir("/home/user/notes/deep/deeper")
        files.write("/home/user/notes/deep/deeper/x.txt", "x")
        one = {e.path for e in files.list("/home/user/notes", depth=1)}
        assert "/home/user/notes/deep" in one and "/home/user/notes/deep/deeper" not in one, one
        three = {e.path for e in files.list("/home/user/notes", depth=3)}
        assert "/home/user/notes/deep/deeper/x.txt" in three, three
        ok("sync list with depth")

        assert files.exists("/home/user/notes/hello.txt")
        assert not files.exists("/home/user/notes/nope.txt")
        entry = files.get_info("/home/user/notes/hello.txt")
        assert entry.type == FileType.FILE and entry.size == 12, entry
        assert entry.permissions == "-rw-r--r--" and entry.mode == 0o644, entry
        assert entry.owner == "user" and entry.group == "user", entry
        directory = files.get_info("/home/user/notes/deep")
        assert directory.type == FileType.DIR and directory.permissions == "drwxr-xr-x", directory
        ok("sync exists and get_info")

        assert files.make_dir("/home/user/made/a/b") is True
        assert files.make_dir("/home/user/made/a/b") is False
        moved = files.rename("/home/user/notes/hello.txt", "/home/user/moved/hello.txt")
        assert moved.path == "/home/user/moved/hello.txt" and moved.type == FileType.FILE, moved
        assert files.read("/home/user/moved/hello.txt") == "hello berth\n"
        files.remove("/home/user/made")
        assert not files.exists("/home/user/made")
        files.remove("/home/user/made")  # gone already: no error, as envd
        ok("sync make_dir, rename and remove")

        handle = files.watch_dir("/home/user/moved")
        files.write("/home/user/moved/new.txt", "new")
        # Written in place, as envd writes: the name created and written, no other name.
        wanted = {("new.txt", FilesystemEventType.CREATE), ("new.txt", FilesystemEventType.WRITE)}
        deadline = time.monotonic() + WAIT_S
        seen = []
        while time.monotonic() < deadline and not wanted <= {(e.name, e.type) for e in seen}:
            seen += handle.get_new_events()
            time.sleep(0.2)
        assert wanted <= {(e.name, e.type) for e in seen}, seen
        assert all(e.name == "new.txt" for e in seen), seen
        handle.stop()
        ok("sync watch_dir")

        url = sbx.download_url("/home/user/moved/hello.txt")
        assert "signature=v1_" in url, url
        # urljoin(E2B_SANDBOX_URL, "/files") drops its /e2b: berth serves its root /files.
        assert urllib.parse.urlparse(url).path == "/files", url
        assert httpx.get(url).text == "hello berth\n"
        up = sbx.upload_url("/home/user/uploaded.txt")
        r = httpx.post(up, files={"file": ("uploaded.txt", b"via a url")})
        assert r.status_code == 200, (r.status_code, r.text)
        assert files.read("/home/user/uploaded.txt") == "via a url"
        expiring = sbx.download_url("/home/user/moved/hello.txt", use_signature_expiration=60)
        assert httpx.get(expiring).text == "hello berth\n"
        expired = sbx.download_url("/home/user/moved/hello.txt", use_signature_expiration=-10)
        r = httpx.get(expired)
        assert r.status_code == 401 and r.json()["code"] == 401, (r.status_code, r.text)
        forged = url.replace("hello.txt", "other.txt")
        assert httpx.get(forged).status_code == 401
        ok("signed urls with httpx, an expired and a forged one refused")
    finally:
        sbx.kill()


async def async_files():
    sbx = await AsyncSandbox.create(template=TEMPLATE, timeout=300)
    try:
        files = sbx.files
        await files.make_dir("/home/user/watched")
        events = []
        handle = await files.watch_dir("/home/user/watched", on_event=events.append, recursive=True)
        await files.write("/home/user/watched/a.txt", "async")
        await files.write("/home/user/watched/bytes.bin", b"\x00\x01")
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not any(
            e.name == "bytes.bin" and e.type == FilesystemEventType.WRITE for e in events
        ):
            await asyncio.sleep(0.2)
        await handle.stop()
        assert any(e.name == "a.txt" and e.type == FilesystemEventType.WRITE for e in events), events
        assert {e.name for e in events} == {"a.txt", "bytes.bin"}, events
        ok("async write and watch_dir")

        assert await files.read("/home/user/watched/a.txt") == "async"
        assert await files.read("/home/user/watched/bytes.bin", format="bytes") == bytearray(b"\x00\x01")
        listed = await files.list("/home/user/watched")
        assert sorted(e.name for e in listed) == ["a.txt", "bytes.bin"], listed
        info = await files.get_info("/home/user/watched/a.txt")
        assert info.size == 5 and info.owner == "user", info
        await files.rename("/home/user/watched/a.txt", "/home/user/watched/b.txt")
        assert await files.exists("/home/user/watched/b.txt")
        await files.remove("/home/user/watched")
        assert not await files.exists("/home/user/watched")
        ok("async read, list, get_info, rename and remove")
    finally:
        await sbx.kill()


sync_files()
asyncio.run(async_files())
# Every check is done and printed. The pinned SDK's native HTTP client (pyqwest) can
# abort in the interpreter's teardown after streaming calls ("Fatal Python error:
# Aborted", no Python frame); leave without it.
sys.stdout.flush()
os._exit(0)
