"""A background process of a box (blocking client): its output from any offset, resumed
across cut connections, its stdin, signals and exit."""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Union

import httpx

from . import _api
from ._sync import Transport
from ._views import ProcessView
from .models import OutputChunk, ProcessExit, ProcessInfo


class Process(ProcessView):
    """A process started with `box.spawn(...)` (or found by `box.processes()`). `offset` is
    where the next `output()` starts: past what this handle has read so far."""

    def __init__(self, transport: Transport, box_id: str, info: ProcessInfo) -> None:
        self._t = transport
        self._box = box_id
        self.info = info
        self.offset = 0
        self.exit: Optional[ProcessExit] = info.exit

    def output(self, offset: Optional[int] = None) -> Iterator[OutputChunk]:
        """The output from `offset` (default: where this handle's reading stopped) to the
        process's exit, as it comes. A cut connection is resumed from the last offset read,
        nothing lost or repeated; leaving the loop early and calling `output()` again goes
        on from there too."""
        cursor = _api.OutputCursor(self.offset if offset is None else offset)
        while cursor.exit is None:
            request = _api.process_output(self._box, self.id, cursor.offset)
            try:
                with self._t.stream(request) as response:
                    for line in response.iter_lines():
                        chunk = cursor.feed(line)
                        if chunk is not None:
                            self.offset = cursor.offset
                            yield chunk
            except (httpx.ReadError, httpx.RemoteProtocolError):
                pass
            if cursor.exit is None:
                cursor.reconnects.cut()
        self.exit = cursor.exit

    def wait(self) -> ProcessExit:
        """Waits for the process to exit (reading, not keeping, the output left)."""
        for _ in self.output():
            pass
        assert self.exit is not None
        return self.exit

    def write_stdin(self, data: Union[str, bytes, Iterable[bytes]], *, close: bool = False) -> None:
        """Writes `data` to the process's stdin (it must have been spawned with
        `open_stdin=True`), as fast as it reads; `close=True` closes stdin after."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._t.send(_api.process_stdin(self._box, self.id, data, close))

    def close_stdin(self) -> None:
        self._t.send(_api.process_stdin(self._box, self.id, b"", True))

    def signal(self, signal: str) -> None:
        """Sends `signal` (`TERM`, `INT`, `HUP`, …) to the process's group."""
        self._t.send(_api.process_signal(self._box, self.id, signal))

    def kill(self) -> None:
        """`KILL` to the process's group."""
        self.signal("KILL")
