"""Files both ways: bytes, text and streams; listings; whole directories; a watch."""

import os
import queue
import threading

import pytest

from berth import Conflict, InvalidRequest, NotFound, PermissionDenied

from conftest import wait_until


def test_bytes_text_and_streams_both_ways(box):
    files = box.files
    files.write("/tmp/hello.txt", "héllo\n")
    assert files.read_text("/tmp/hello.txt") == "héllo\n"
    blob = bytes(range(256)) * 1024
    files.write("/tmp/blob", blob, mode=0o600)
    assert files.read("/tmp/blob") == blob
    assert files.stat("/tmp/blob").mode & 0o777 == 0o600
    files.write("/tmp/streamed", (bytes([i]) * 70000 for i in range(5)))
    streamed = b"".join(files.read_stream("/tmp/streamed"))
    assert streamed == b"".join(bytes([i]) * 70000 for i in range(5))
    assert box.exec("wc -c < /tmp/streamed").stdout.strip() == "350000"


def test_listing_stat_mkdir_and_remove(box):
    files = box.files
    files.mkdir("/tmp/tree/a/b", recursive=True)
    files.write("/tmp/tree/a/file", b"12345")
    entries = {e.name: e for e in files.list("/tmp/tree/a")}
    assert entries["b"].kind == "dir" and entries["file"].kind == "file"
    assert entries["file"].size == 5
    assert files.stat("/tmp/tree/a/file").kind == "file"
    assert files.exists("/tmp/tree/a") and not files.exists("/tmp/tree/nothing")
    with pytest.raises(Conflict) as caught:
        files.remove("/tmp/tree")
    assert caught.value.code == "not_empty"
    files.remove("/tmp/tree", recursive=True)
    assert not files.exists("/tmp/tree")


def test_file_errors_map(box):
    files = box.files
    with pytest.raises(NotFound):
        files.read("/tmp/no-such-file")
    with pytest.raises(InvalidRequest) as caught:
        files.read("/tmp")
    assert caught.value.code == "is_a_directory"
    files.write("/tmp/roots", b"secret", mode=0o600, user="root")
    with pytest.raises(PermissionDenied):
        files.read("/tmp/roots")
    assert files.read("/tmp/roots", user="root") == b"secret"


def test_a_directory_goes_up_and_comes_back(box, tmp_path):
    source = tmp_path / "source"
    (source / "sub/deeper").mkdir(parents=True)
    (source / "top.txt").write_text("top\n")
    (source / "sub/deeper/data.bin").write_bytes(os.urandom(200_000))
    (source / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (source / "run.sh").chmod(0o755)
    (source / "link").symlink_to("top.txt")

    written = box.files.upload_dir(source, "/tmp/up/there")
    assert (written.files, written.dirs, written.links) == (3, 2, 1)
    assert box.exec("/tmp/up/there/run.sh").stdout == "ran\n"
    assert box.exec("cat /tmp/up/there/link").stdout == "top\n"

    box.exec("echo made in the box > /tmp/up/there/sub/new.txt")
    back = tmp_path / "back"
    box.files.download_dir("/tmp/up/there", back)
    assert (back / "top.txt").read_text() == "top\n"
    assert (back / "sub/deeper/data.bin").read_bytes() == (
        source / "sub/deeper/data.bin"
    ).read_bytes()
    assert (back / "sub/new.txt").read_text() == "made in the box\n"
    assert os.readlink(back / "link") == "top.txt"
    assert os.stat(back / "run.sh").st_mode & 0o777 == 0o755


def test_a_watch_sees_changes_until_its_directory_goes(box):
    box.files.mkdir("/tmp/watched")
    events = queue.Queue()

    def watch():
        try:
            for event in box.files.watch("/tmp/watched", recursive=True):
                events.put(event)
        finally:
            events.put(None)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    # The watch is on once a change shows: probe until one does.
    seen = []
    probes = iter(range(10_000))

    def probed():
        box.files.write(f"/tmp/watched/probe-{next(probes)}", b"")
        while not events.empty():
            seen.append(events.get())
        return any(e.type == "create" for e in seen)

    wait_until(probed, "a probe's create event")
    seen.clear()
    box.exec("mkdir /tmp/watched/d && echo x > /tmp/watched/d/f && mv /tmp/watched/d/f /tmp/watched/d/g")
    box.exec("rm -rf /tmp/watched")
    thread.join(30)
    assert not thread.is_alive(), "the watch did not end when its directory went"
    while True:
        event = events.get_nowait()
        if event is None:
            break
        seen.append(event)
    kinds = [(e.type, e.path or e.to) for e in seen]
    assert ("create", "d") in kinds, kinds
    assert ("create", "d/f") in kinds, kinds
    assert any(e.type == "rename" and (e.from_path, e.to) == ("d/f", "d/g") for e in seen), kinds
    assert seen[-1].type == "gone", kinds
