"""A box's files for an asyncio program (`AsyncBox.files`), as `berth.files.Files`: the
blocking parts (a local directory's tar, a spooled download's extraction) run on worker
threads, so the event loop never waits on a disk."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import AsyncIterator, Iterable, List, Optional, Union

from . import _api, _tar
from ._async import AsyncTransport
from .errors import NotFound
from .models import ArchiveWritten, FileEntry, WatchEvent


class AsyncFiles:
    """A box's files, as `Files`."""

    def __init__(self, transport: AsyncTransport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    async def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        return (await self._t.send(_api.read_file(self._box, path, user))).content

    async def read_text(
        self, path: str, *, user: Optional[str] = None, encoding: str = "utf-8"
    ) -> str:
        return (await self.read(path, user=user)).decode(encoding)

    async def read_stream(self, path: str, *, user: Optional[str] = None) -> AsyncIterator[bytes]:
        async with self._t.stream(_api.read_file(self._box, path, user)) as response:
            async for chunk in response.aiter_bytes():
                yield chunk

    async def write(
        self,
        path: str,
        data: Union[str, bytes, Iterable[bytes], AsyncIterator[bytes]],
        *,
        mode: Optional[int] = None,
        user: Optional[str] = None,
    ) -> None:
        """Writes `data` (text, bytes, or chunks from an iterable or an async iterable)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        await self._t.send(_api.write_file(self._box, path, data, mode, user))

    async def list(self, path: str, *, user: Optional[str] = None) -> List[FileEntry]:
        answer = (await self._t.send(_api.list_files(self._box, path, user))).json()
        return [FileEntry.from_json(e) for e in answer["entries"]]

    async def stat(self, path: str, *, user: Optional[str] = None) -> FileEntry:
        answer = await self._t.send(_api.stat_file(self._box, path, user))
        return FileEntry.from_json(answer.json())

    async def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        try:
            await self.stat(path, user=user)
        except NotFound:
            return False
        return True

    async def mkdir(
        self, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> None:
        await self._t.send(_api.make_dir(self._box, path, recursive, user))

    async def remove(
        self, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> None:
        await self._t.send(_api.remove_file(self._box, path, recursive, user))

    async def upload_dir(
        self, local: Union[str, Path], path: str, *, user: Optional[str] = None
    ) -> ArchiveWritten:
        """The local directory's tar is made on a worker thread as it is sent."""
        request = _api.write_archive(self._box, path, _tar.tar_chunks(local), user)
        return ArchiveWritten.from_json((await self._t.send(request)).json())

    async def download_dir(
        self, path: str, local: Union[str, Path], *, user: Optional[str] = None
    ) -> None:
        """The tar is spooled to a temporary file as it comes (memory holds a chunk), then
        extracted on a worker thread, never outside `local`."""
        with tempfile.TemporaryFile() as spool:
            async with self._t.stream(_api.read_archive(self._box, path, user)) as response:
                async for chunk in response.aiter_bytes():
                    await asyncio.to_thread(spool.write, chunk)
            spool.seek(0)
            await asyncio.to_thread(_tar.extract, spool, local)  # type: ignore[arg-type]

    async def watch(
        self, path: str, *, recursive: bool = False, user: Optional[str] = None
    ) -> AsyncIterator[WatchEvent]:
        request = _api.watch_files(self._box, path, recursive, user)
        async with self._t.stream(request) as response:
            async for line in response.aiter_lines():
                event = _api.watch_event(line)
                if event is not None:
                    yield event
                    if event.type == "gone":
                        return
