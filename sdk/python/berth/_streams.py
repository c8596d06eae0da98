"""The API's streamed answers read one line at a time, with no I/O: an exec's NDJSON frames,
a process's output, a watch, the event log's server-sent events, and which events end a
message's turn. `_api` re-exports each, so the clients reach them there."""

from __future__ import annotations

import base64
import codecs
import json
from typing import Any, Callable, Dict, List, Optional, Union

from .errors import BerthError, Unavailable, error_for
from .models import Event, ExecResult, OutputChunk, ProcessExit, WatchEvent


def cut(what: str) -> BerthError:
    """A stream that ended before its last frame: the daemon or the box went away."""
    return Unavailable(f"{what} ended before its end: the connection was cut", code="unavailable")


OutputCallback = Callable[[str], Any]


class ExecCollector:
    """Folds a streamed exec's frames (`started`, `stdout`, `stderr`, then `exit` or
    `error`) into an [`ExecResult`], handing each piece of output to its callback as it
    comes. Bytes are decoded as UTF-8 across frame boundaries (a character may be split
    between two frames)."""

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]):
        self._callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in self._callbacks
        }
        self._text: Dict[str, List[str]] = {"stdout": [], "stderr": []}
        self.result: Optional[ExecResult] = None

    def feed(self, line: str) -> Optional[Any]:
        """Takes one NDJSON line; answers what a callback returned (an async client awaits
        it when it is a coroutine), else `None`."""
        if not line.strip():
            return None
        frame = json.loads(line)
        kind = frame.get("type")
        if kind in ("stdout", "stderr"):
            text = self._decoders[kind].decode(base64.b64decode(frame["data"]))
            return self._emit(kind, text)
        if kind == "exit":
            self._finish(frame)
        elif kind == "error":
            raise error_for(frame.get("code", "unknown"), frame.get("message", ""))
        return None

    def _emit(self, kind: str, text: str) -> Optional[Any]:
        if not text:
            return None
        self._text[kind].append(text)
        callback = self._callbacks[kind]
        return callback(text) if callback else None

    def _finish(self, frame: Dict[str, Any]) -> None:
        for kind, decoder in self._decoders.items():
            # What a cut character left behind; its callback is not called for it.
            self._text[kind].append(decoder.decode(b"", final=True))
        code = frame.get("code")
        signal = frame.get("signal")
        self.result = ExecResult(
            exit_code=code if code is not None else 128 + (signal or 0),
            stdout="".join(self._text["stdout"]),
            stderr="".join(self._text["stderr"]),
            timed_out=bool(frame.get("timed_out")),
        )


def output_frame(line: str) -> Union[OutputChunk, ProcessExit, None]:
    """One line of a process's output stream: a chunk, its exit, or `None` (a blank line,
    or a frame type from a newer daemon)."""
    if not line.strip():
        return None
    frame = json.loads(line)
    kind = frame.get("type")
    if kind == "output":
        return OutputChunk(frame["stream"], frame["offset"], base64.b64decode(frame["data"]))
    if kind == "exit":
        return ProcessExit.from_json(frame)
    return None


class Reconnects:
    """How many times in a row a resumable stream (a process's output, the event log) was
    cut without bringing anything: past [`MAX`], the reader gives up, since the daemon
    keeps closing it."""

    MAX = 5

    def __init__(self, what: str) -> None:
        self._what = what
        self._cuts = 0

    def progress(self) -> None:
        self._cuts = 0

    def cut(self) -> None:
        """The stream ended before its end: resume, unless it keeps happening."""
        self._cuts += 1
        if self._cuts > self.MAX:
            raise cut(self._what)


class OutputCursor:
    """Where a reader of a process's output (or a service's log, which has no exit) is: the
    offset to resume from, and the exit once seen."""

    def __init__(self, offset: int, what: str = "the process's output stream") -> None:
        self.offset = offset
        self.exit: Optional[ProcessExit] = None
        self.reconnects = Reconnects(what)

    def feed(self, line: str) -> Optional[OutputChunk]:
        """Takes one line; answers the chunk it held, if any."""
        frame = output_frame(line)
        if isinstance(frame, ProcessExit):
            self.exit = frame
        elif isinstance(frame, OutputChunk):
            # A chunk past the asked offset means older output is no longer kept.
            self.offset = frame.end
            self.reconnects.progress()
            return frame
        return None


def watch_event(line: str) -> Optional[WatchEvent]:
    """One line of a watch: an event, or `None` for the keep-alive blank lines."""
    return WatchEvent.from_json(json.loads(line)) if line.strip() else None


class SseParser:
    """Server-sent events, one line at a time: answers each whole event's JSON (its
    `data:` lines), and nothing for comments (the keep-alives) or the other fields (the
    event's seq and type are in its JSON too)."""

    def __init__(self) -> None:
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[Event]:
        if line == "":
            if not self._data:
                return None
            text, self._data = "\n".join(self._data), []
            return Event.from_json(json.loads(text))
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


class TurnFilter:
    """Picks a message's turn out of the box's events after the post: every event up to
    the `result` carrying the message's `message_id` (or a `turn_timeout` for it, when
    the harness never answered). A turn of an earlier message still running when this one
    was posted shows its tail too."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.done = False

    def take(self, event: Event) -> None:
        if event.type in ("result", "turn_timeout") and event.message_id == self.message_id:
            self.done = True
