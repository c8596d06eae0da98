"""The calls of berth's API as plain data, with no I/O: each function builds the [`Request`]
of one call, and the decoders turn what comes back into models. The clients only send the
requests and feed the answers here, so the call shapes are written once (docs/api.md has
each call)."""

from __future__ import annotations

import base64
import codecs
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from .errors import BerthError, BoxFailed, Unavailable, error_for
from .models import BoxInfo, Event, ExecResult, OutputChunk, ProcessExit, WatchEvent

Params = List[Tuple[str, str]]
Command = Union[str, Sequence[str]]


@dataclass(frozen=True)
class Request:
    """One call: its method, path and query, a JSON body or raw bytes, extra headers, the
    box it is about (its errors may be a failed start, [`BoxFailed`]), and whether its
    answer may take as long as the box's program (`unbounded`: no read timeout)."""

    method: str
    path: str
    params: Params = field(default_factory=list)
    json: Any = None
    content: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    box: Optional[str] = None
    unbounded: bool = False


def box_path(ref: str, *rest: str) -> str:
    return "/v1/boxes/" + "/".join(quote(part, safe="") for part in (ref, *rest))


def _drop_none(fields: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def cut(what: str) -> BerthError:
    """A stream that ended before its last frame: the daemon or the box went away."""
    return Unavailable(f"{what} ended before its end: the connection was cut", code="unavailable")


# Boxes


def failed_start(error: Unavailable, box: Optional[BoxInfo]) -> BerthError:
    """A `503` on a box's call is a failed start when the box is now `failed`: the API says
    so only in the box's state, which the client looked up (`None`: it could not)."""
    if box is None or box.state != "failed":
        return error
    return BoxFailed(
        error.message, reason=box.state_reason, failure=box.failure, status=error.status
    )


def create_box(name: str, fields: Mapping[str, Any]) -> Request:
    return Request("POST", "/v1/boxes", json={"name": name, **_drop_none(fields)})


def list_boxes(labels: Optional[Mapping[str, str]], state: Optional[str]) -> Request:
    params = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
    if state is not None:
        params.append(("state", state))
    return Request("GET", "/v1/boxes", params=params)


def get_box(ref: str) -> Request:
    return Request("GET", box_path(ref))


def delete_box(ref: str) -> Request:
    return Request("DELETE", box_path(ref), box=ref)


def update_box(ref: str, fields: Mapping[str, Any]) -> Request:
    return Request("PATCH", box_path(ref), json=_drop_none(fields), box=ref)


def box_verb(ref: str, verb: str, body: Optional[Dict[str, Any]] = None) -> Request:
    """`start`, `stop`, `pause`, `resume` or `snapshot`; a start or resume may take as
    long as a cold boot (a VM's: up to its boot deadline), so it waits without a limit."""
    return Request(
        "POST", box_path(ref, verb), json=body, box=ref, unbounded=True
    )


# Exec


def argv(cmd: Command) -> List[str]:
    """A command line: a string runs through `sh -c`, a sequence as it is."""
    return ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)


def exec_body(
    cmd: Command,
    *,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    user: Optional[str],
    stdin: Optional[Union[str, bytes]],
    timeout: Optional[float],
) -> Dict[str, Any]:
    if isinstance(stdin, bytes):
        stdin = stdin.decode("utf-8")
    return _drop_none(
        {
            "cmd": argv(cmd),
            "cwd": cwd,
            "env": dict(env) if env else None,
            "user": user,
            "stdin": stdin,
            "timeout_s": None if timeout is None else max(1, int(round(timeout))),
        }
    )


def exec_request(ref: str, body: Dict[str, Any], stream: bool) -> Request:
    """A collected exec answers when the command ends (after its `timeout_s`, 60 by
    default, at the latest); a streamed one as it goes."""
    headers = {"Accept": "application/x-ndjson"} if stream else {}
    return Request(
        "POST", box_path(ref, "exec"), json=body, headers=headers, box=ref,
        unbounded=True,
    )


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


# Background processes


def spawn_body(
    body: Dict[str, Any], *, open_stdin: bool, keep_awake: Optional[bool]
) -> Dict[str, Any]:
    """An [`exec_body`] made a background process's."""
    body = {**body, "background": True}
    if open_stdin:
        body["open_stdin"] = True
    if keep_awake is not None:
        body["keep_awake"] = keep_awake
    return body


def list_processes(ref: str) -> Request:
    return Request("GET", box_path(ref, "processes"), box=ref)


def process_output(ref: str, pid: str, offset: int) -> Request:
    return Request(
        "GET", box_path(ref, "processes", pid, "output"), params=[("offset", str(offset))],
        box=ref, unbounded=True,
    )


def process_stdin(ref: str, pid: str, data: Any, close: bool) -> Request:
    return Request(
        "POST", box_path(ref, "processes", pid, "stdin"),
        params=[("close", "true")] if close else [],
        content=data, headers={"Content-Type": "application/octet-stream"}, box=ref,
        unbounded=True,
    )


def process_signal(ref: str, pid: str, signal: str) -> Request:
    name = signal.upper()
    name = name[3:] if name.startswith("SIG") else name
    return Request("POST", box_path(ref, "processes", pid, "signal"), json={"signal": name}, box=ref)


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
    """Where a reader of a process's output is: the offset to resume from, and the exit
    once seen."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.exit: Optional[ProcessExit] = None
        self.reconnects = Reconnects("the process's output stream")

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


# Files


def _file_params(path: str, user: Optional[str], *extra: Tuple[str, str]) -> Params:
    params = [("path", path), *extra]
    if user is not None:
        params.append(("user", user))
    return params


def read_file(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files"), params=_file_params(path, user), box=ref,
                   unbounded=True)


def write_file(ref: str, path: str, data: Any, mode: Optional[int], user: Optional[str]) -> Request:
    extra = [("mode", str(mode))] if mode is not None else []
    return Request(
        "PUT", box_path(ref, "files"), params=_file_params(path, user, *extra), content=data,
        headers={"Content-Type": "application/octet-stream"}, box=ref, unbounded=True,
    )


def list_files(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "list"), params=_file_params(path, user), box=ref)


def stat_file(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "stat"), params=_file_params(path, user), box=ref)


def _recursive(recursive: bool) -> List[Tuple[str, str]]:
    return [("recursive", "true")] if recursive else []


def make_dir(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("POST", box_path(ref, "files", "mkdir"), params=params, box=ref)


def remove_file(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("DELETE", box_path(ref, "files"), params=params, box=ref)


def read_archive(ref: str, path: str, user: Optional[str]) -> Request:
    return Request("GET", box_path(ref, "files", "archive"), params=_file_params(path, user),
                   box=ref, unbounded=True)


def write_archive(ref: str, path: str, tar: Any, user: Optional[str]) -> Request:
    return Request(
        "PUT", box_path(ref, "files", "archive"), params=_file_params(path, user), content=tar,
        headers={"Content-Type": "application/x-tar"}, box=ref, unbounded=True,
    )


def watch_files(ref: str, path: str, recursive: bool, user: Optional[str]) -> Request:
    params = _file_params(path, user, *_recursive(recursive))
    return Request("GET", box_path(ref, "files", "watch"), params=params, box=ref, unbounded=True)


def watch_event(line: str) -> Optional[WatchEvent]:
    """One line of a watch: an event, or `None` for the keep-alive blank lines."""
    return WatchEvent.from_json(json.loads(line)) if line.strip() else None


# Messages and events


def post_message(ref: str, content: str, key: Optional[str]) -> Request:
    body = {"content": content, **({"id": key} if key else {})}
    return Request("POST", box_path(ref, "messages"), json=body, box=ref)


def event_page(ref: str, after: int) -> Request:
    params = [("after", str(after)), ("wait", "false")]
    return Request("GET", box_path(ref, "events"), params=params, box=ref)


def event_stream(ref: str, after: int) -> Request:
    return Request(
        "GET", box_path(ref, "events"), params=[("after", str(after))],
        headers={"Accept": "text/event-stream"}, box=ref, unbounded=True,
    )


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


# Ports and share links


def port_urls(ref: str, port: int) -> Request:
    return Request("GET", box_path(ref, "ports"), params=[("port", str(port))], box=ref)


def share_port(ref: str, port: int, ttl_s: int) -> Request:
    return Request("POST", box_path(ref, "ports", str(port), "links"), json={"ttl_s": ttl_s}, box=ref)


def list_links(ref: str, port: Optional[int]) -> Request:
    path = box_path(ref, "links") if port is None else box_path(ref, "ports", str(port), "links")
    return Request("GET", path, box=ref)


def revoke_link(ref: str, link_id: str) -> Request:
    return Request("DELETE", box_path(ref, "links", link_id), box=ref)
