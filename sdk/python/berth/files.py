"""A box's files (blocking client): bytes and text both ways, streamed; listings; whole
directories as tar streams; watches. Every call takes `user` (`user` by default, or
`root`) and wakes a stopped box."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Union

from . import _api, _tar
from ._sync import Transport
from .errors import NotFound
from .models import ArchiveWritten, FileEntry, WatchEvent

Data = Union[str, bytes, Iterable[bytes]]


class Files:
    def __init__(self, transport: Transport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        """The file's bytes."""
        return self._t.send(_api.read_file(self._box, path, user)).content

    def read_text(self, path: str, *, user: Optional[str] = None, encoding: str = "utf-8") -> str:
        return self.read(path, user=user).decode(encoding)

    def read_stream(self, path: str, *, user: Optional[str] = None) -> Iterator[bytes]:
        """The file's bytes as they come (for a file too big to hold)."""
        with self._t.stream(_api.read_file(self._box, path, user)) as response:
            yield from response.iter_bytes()

    def write(
        self, path: str, data: Data, *, mode: Optional[int] = None, user: Optional[str] = None
    ) -> None:
        """Writes `data` (text as UTF-8, bytes, or an iterable of byte chunks, streamed) to
        `path`, atomically; `mode` is its permission bits (e.g. `0o755`)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._t.send(_api.write_file(self._box, path, data, mode, user))

    def list(self, path: str, *, user: Optional[str] = None) -> List[FileEntry]:
        answer = self._t.send(_api.list_files(self._box, path, user)).json()
        return [FileEntry.from_json(e) for e in answer["entries"]]

    def stat(self, path: str, *, user: Optional[str] = None) -> FileEntry:
        return FileEntry.from_json(self._t.send(_api.stat_file(self._box, path, user)).json())

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        try:
            self.stat(path, user=user)
        except NotFound:
            return False
        return True

    def mkdir(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> None:
        """Makes a directory (with its parents when `recursive`)."""
        self._t.send(_api.make_dir(self._box, path, recursive, user))

    def remove(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> None:
        """Removes a file, or a directory (a non-empty one only when `recursive`)."""
        self._t.send(_api.remove_file(self._box, path, recursive, user))

    def upload_dir(
        self, local: Union[str, Path], path: str, *, user: Optional[str] = None
    ) -> ArchiveWritten:
        """Copies the contents of the local directory `local` into the box's directory
        `path` (made if missing), streamed as a tar."""
        request = _api.write_archive(self._box, path, _tar.tar_chunks(local), user)
        return ArchiveWritten.from_json(self._t.send(request).json())

    def download_dir(
        self, path: str, local: Union[str, Path], *, user: Optional[str] = None
    ) -> None:
        """Copies the contents of the box's directory `path` into the local directory
        `local` (made if missing), streamed as a tar; nothing is written outside it."""
        with self._t.stream(_api.read_archive(self._box, path, user)) as response:
            _tar.extract(_tar.ChunkReader(response.iter_bytes()), local)

    def watch(
        self, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> Iterator[WatchEvent]:
        """The changes under directory `path` as they happen, until the loop leaves or the
        path itself goes (a `gone` event, the last). A box going to sleep ends it."""
        with self._t.stream(_api.watch_files(self._box, path, recursive, user)) as response:
            for line in response.iter_lines():
                event = _api.watch_event(line)
                if event is not None:
                    yield event
                    if event.type == "gone":
                        return
