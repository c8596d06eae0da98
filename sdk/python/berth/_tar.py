"""Whole directories as tar streams (`PUT`/`GET …/files/archive`), with no I/O of the
network: [`tar_chunks`] reads a local directory into tar bytes a piece at a time (a file
is never held whole), [`extract`] writes a tar read from any `read(n)` source into a local
directory, never outside it."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Union

CHUNK = 64 * 1024
BLOCK = tarfile.BLOCKSIZE


def tar_chunks(directory: Union[str, Path]) -> Iterator[bytes]:
    """A tar of `directory`'s contents, names relative to it: regular files, directories
    and symlinks (stored as links); sockets, FIFOs and devices are left out, as the box
    leaves them out of its own archives."""
    root = Path(directory)
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    # gettarinfo needs a TarFile; this one only describes entries (and notes hard links).
    describer = tarfile.open(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT)
    for here, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            path = Path(here, name)
            arcname = path.relative_to(root).as_posix()
            info = describer.gettarinfo(str(path), arcname)
            if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                continue
            yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            if info.isreg():
                yield from _file_blocks(path, info.size)
    yield b"\0" * (2 * BLOCK)


def _file_blocks(path: Path, size: int) -> Iterator[bytes]:
    """The file's `size` bytes (as its header said: a file that changes meanwhile is cut
    or padded, so the tar stays well formed), padded to the tar's block."""
    left = size
    with open(path, "rb") as file:
        while left > 0:
            chunk = file.read(min(CHUNK, left))
            if not chunk:
                chunk = b"\0" * min(CHUNK, left)
            left -= len(chunk)
            yield chunk
    if size % BLOCK:
        yield b"\0" * (BLOCK - size % BLOCK)


class ChunkReader(io.RawIOBase):
    """A `read(n)` file over an iterator of byte chunks (an answer's body)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def extract(source: io.RawIOBase, directory: Union[str, Path]) -> None:
    """Extracts the tar read from `source` into `directory` (made if missing). A member
    that would land outside it (an absolute name, `..`, a link leaving it) is refused
    with `tarfile.TarError`, like the box's own extraction."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BufferedReader(source, CHUNK), mode="r|") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, filter="data")
            return
        # Pythons before the extraction filters (3.9.16 and older): the same refusals.
        for member in tar:
            _check(member)
            tar.extract(member, root)


def _check(member: tarfile.TarInfo) -> None:
    for name in (member.name, member.linkname if member.issym() or member.islnk() else ""):
        parts = PurePosixPath(name).parts
        if name.startswith("/") or ".." in parts:
            raise tarfile.TarError(f"refused tar entry {member.name!r}: it leaves the directory")
