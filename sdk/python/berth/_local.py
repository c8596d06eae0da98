"""The local file of a call that moves a whole box (`box.backup`, `client.boxes.restore`),
with no I/O of the network: [`Download`] writes what comes to a temporary file beside its
name and renames it onto the name only once whole, so a cut or failed download never
leaves a file there; [`upload`] reads a file a chunk at a time, never whole."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Tuple, Union

from .models_backup import BackupFile

CHUNK = 1024 * 1024

#: A local path.
LocalPath = Union[str, "os.PathLike[str]"]


class Download:
    """A download to `dest`: a file's path (replaced once the download is whole), or an
    existing directory, where the file takes the name the answer gives (else
    `fallback`). The temporary file (`.berth-….part`, readable by its owner only, as the
    finished file is) is made at once in the same directory, so a directory that cannot
    take it fails the call before it is sent."""

    def __init__(self, dest: LocalPath, fallback: str) -> None:
        target = Path(dest)
        if target.is_dir():
            self._dir, self._name = target, None
        else:
            self._dir, self._name = target.parent, target.name
        self._fallback = fallback
        fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".berth-", suffix=".part")
        self._tmp: Optional[Path] = Path(tmp)
        self._file = os.fdopen(fd, "wb")
        self.bytes = 0

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.bytes += len(chunk)

    def finish(self, given: Optional[str]) -> BackupFile:
        """Syncs the whole file to disk and renames it onto its name: `dest`, or in the
        directory `dest`, `given` (the answer's name; `None`: the fallback)."""
        assert self._tmp is not None, "a download finishes once"
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        path = self._dir / (self._name or given or self._fallback)
        os.replace(self._tmp, path)
        self._tmp = None
        _sync_dir(self._dir)
        return BackupFile(path=path, bytes=self.bytes)

    def abort(self) -> None:
        """Closes and removes the temporary file; nothing once finished."""
        tmp, self._tmp = self._tmp, None
        if tmp is None:
            return
        try:
            self._file.close()  # what a full disk left in its buffer may fail again
        except OSError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _sync_dir(directory: Path) -> None:
    """The rename made durable, where the system lets a directory be synced."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _chunks(file: IO[bytes]) -> Iterator[bytes]:
    while True:
        chunk = file.read(CHUNK)
        if not chunk:
            return
        yield chunk


@contextlib.contextmanager
def upload(source: Any) -> Iterator[Tuple[Any, Optional[int]]]:
    """A request body of `source` and its length when known: a path (`str` or
    `os.PathLike`) is opened for the block and read a chunk at a time (a regular file's
    size sent as the length); bytes, or an iterable (or async iterable) of byte chunks, go
    as they are."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            info = os.fstat(file.fileno())
            yield _chunks(file), info.st_size if stat.S_ISREG(info.st_mode) else None
        return
    if isinstance(source, bytearray):
        source = bytes(source)
    yield source, None
