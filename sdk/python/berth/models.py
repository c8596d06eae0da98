"""The API's answers as typed dataclasses.

Each model reads the fields this SDK knows and keeps the whole answer in `raw`: responses
may gain fields (docs/api.md, "Conventions"), and a caller of an older SDK can still reach
them there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Limits:
    """A box's resource limits."""

    memory_mib: int
    pids: int
    cpus: float

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Limits":
        return cls(memory_mib=data["memory_mib"], pids=data["pids"], cpus=data["cpus"])


@dataclass(frozen=True)
class BoxInfo:
    """A box as the API shows it (`GET /v1/boxes/{ref}`)."""

    id: str
    name: str
    template: str
    state: str
    state_reason: Optional[str]
    runtime: str
    limits: Limits
    labels: Dict[str, str]
    env: Dict[str, str]
    pause_after_s: int
    snapshot_after_s: int
    stop_after_s: int
    auto_resume: bool
    disk_mib: int
    created_at: str
    last_activity_at: Optional[str]
    failure: Optional[Dict[str, Any]]
    pending_limits: Optional[Limits]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "BoxInfo":
        pending = data.get("pending_limits")
        return cls(
            id=data["id"],
            name=data["name"],
            template=data["template"],
            state=data["state"],
            state_reason=data.get("state_reason"),
            runtime=data["runtime"],
            limits=Limits.from_json(data["limits"]),
            labels=dict(data.get("labels") or {}),
            env=dict(data.get("env") or {}),
            pause_after_s=data["pause_after_s"],
            snapshot_after_s=data["snapshot_after_s"],
            stop_after_s=data["stop_after_s"],
            auto_resume=data["auto_resume"],
            disk_mib=data["disk_mib"],
            created_at=data["created_at"],
            last_activity_at=data.get("last_activity_at"),
            failure=data.get("failure"),
            pending_limits=Limits.from_json(pending) if pending else None,
            raw=data,
        )


@dataclass(frozen=True)
class ExecResult:
    """A finished command: its `exit_code` (128 + signal after a signal), its output, and
    whether it ran past its timeout or its output was cut at 16 MiB."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ExecResult":
        return cls(
            exit_code=data["exit_code"],
            stdout=data["stdout"],
            stderr=data["stderr"],
            timed_out=data.get("timed_out", False),
            truncated=data.get("truncated", False),
        )


@dataclass(frozen=True)
class ProcessExit:
    """How a background process ended: `code` (`None` after a signal), `signal`, whether
    its timeout killed it, and `output_end`, the offset just past its last output byte."""

    code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    output_end: Optional[int] = None

    @property
    def status(self) -> int:
        """The shell's status: the code, or 128 + the signal."""
        return self.code if self.code is not None else 128 + (self.signal or 0)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ProcessExit":
        return cls(
            code=data.get("code"),
            signal=data.get("signal"),
            timed_out=bool(data.get("timed_out")),
            output_end=data.get("output_end"),
        )


@dataclass(frozen=True)
class ProcessInfo:
    """A background process as the box's agent knows it."""

    id: str
    pid: int
    argv: List[str]
    user: Optional[str]
    started_at_ms: Optional[int]
    keep_awake: bool
    stdin_open: bool
    output_end: int
    exit: Optional[ProcessExit]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ProcessInfo":
        exit = data.get("exit")
        return cls(
            id=data["id"],
            pid=data["pid"],
            argv=list(data["argv"]),
            user=data.get("user"),
            started_at_ms=data.get("started_at_ms"),
            keep_awake=bool(data.get("keep_awake", True)),
            stdin_open=bool(data.get("stdin_open")),
            output_end=data.get("output_end", 0),
            exit=ProcessExit.from_json(exit) if exit else None,
            raw=data,
        )


@dataclass(frozen=True)
class ServiceInfo:
    """A service of a box (a daemon its template declares, supervised in the box): `state`
    is `waiting`, `starting`, `running`, `restarting`, `stopping`, `exited`, `failed`, or
    `stopped` while the box is not running; `restarts` counts the lives after the first,
    this boot; `log_end` is the offset just past its log's last byte; a failed one has its
    `reason`, `last_exit` and `log_tail`. Times are milliseconds since the Unix epoch."""

    name: str
    state: str
    pid: Optional[int]
    restarts: int
    started_at_ms: Optional[int]
    ready_at_ms: Optional[int]
    last_exit: Optional[ProcessExit]
    reason: Optional[str]
    log_end: int
    log_tail: Optional[str]
    keep_awake: bool
    after: List[str]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ServiceInfo":
        last_exit = data.get("last_exit")
        return cls(
            name=data["name"],
            state=data["state"],
            pid=data.get("pid"),
            restarts=data.get("restarts", 0),
            started_at_ms=data.get("started_at_ms"),
            ready_at_ms=data.get("ready_at_ms"),
            last_exit=ProcessExit.from_json(last_exit) if last_exit else None,
            reason=data.get("reason"),
            log_end=data.get("log_end", 0),
            log_tail=data.get("log_tail"),
            keep_awake=bool(data.get("keep_awake")),
            after=list(data.get("after") or []),
            raw=data,
        )


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a background process's output or of a service's log: which `stream`, its
    `offset` (stdout and stderr counted together, in the order they came) and its bytes."""

    stream: str
    offset: int
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    @property
    def end(self) -> int:
        """The offset just past this chunk: where a reader resumes."""
        return self.offset + len(self.data)


@dataclass(frozen=True)
class FileEntry:
    """A file in a box: `kind` is `file`, `dir`, `symlink` or `other`; `mode` the
    permission bits (e.g. `0o644`); `mtime` seconds since the Unix epoch."""

    name: str
    kind: str
    size: int
    mode: int
    mtime: int
    owner: Optional[str] = None
    group: Optional[str] = None
    symlink_target: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "FileEntry":
        return cls(
            name=data["name"],
            kind=data["kind"],
            size=data["size"],
            mode=data["mode"],
            mtime=data["mtime"],
            owner=data.get("owner"),
            group=data.get("group"),
            symlink_target=data.get("symlink_target"),
        )


@dataclass(frozen=True)
class WatchEvent:
    """One change a watch saw: `type` is `create`, `modify`, `delete`, `rename` (with
    `from_path` and `to`), `overflow` (events were dropped: rescan) or `gone` (the watched
    path itself went; the watch ends). Paths are relative to the watched directory."""

    type: str
    path: Optional[str] = None
    dir: bool = False
    from_path: Optional[str] = None
    to: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "WatchEvent":
        return cls(
            type=data["type"],
            path=data.get("path"),
            dir=bool(data.get("dir")),
            from_path=data.get("from"),
            to=data.get("to"),
        )


@dataclass(frozen=True)
class ArchiveWritten:
    """What an upload of a directory wrote: files, directories, links and bytes."""

    files: int
    dirs: int
    links: int
    bytes: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ArchiveWritten":
        return cls(files=data["files"], dirs=data["dirs"], links=data["links"], bytes=data["bytes"])


@dataclass(frozen=True)
class Event:
    """One event of a box's log: `seq` (per box, from 1, no gaps), `type` (the harness's
    own, `system`, `assistant`, `user`, `result`, …, or berth's: `state`, `log`,
    `process_exit`, `gap`, …) and its `data`."""

    seq: int
    type: str
    data: Dict[str, Any]
    created_at: str

    @property
    def message_id(self) -> Optional[str]:
        """The message a `user` replay or a `result` belongs to."""
        value = self.data.get("message_id") if isinstance(self.data, dict) else None
        return value if isinstance(value, str) else None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Event":
        return cls(
            seq=data["seq"], type=data["type"], data=data.get("data") or {},
            created_at=data.get("created_at", ""),
        )


@dataclass(frozen=True)
class EventPage:
    """A page of events: `next_after` is where the next page starts, `more` whether more
    are stored already; `gap` (`first`, `last`) names events pruned before they were read."""

    events: List[Event]
    next_after: int
    more: bool
    gap: Optional[Dict[str, int]]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "EventPage":
        return cls(
            events=[Event.from_json(e) for e in data["events"]],
            next_after=data["next_after"],
            more=data["more"],
            gap=data.get("gap"),
        )


@dataclass(frozen=True)
class PortUrls:
    """Where a box's port is reached: `url` (needs the API key, or a share link's cookie)
    and `host_url` (`None` unless the daemon has a `[ports] base_domain`)."""

    port: int
    url: str
    host_url: Optional[str]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "PortUrls":
        return cls(port=data["port"], url=data["url"], host_url=data.get("host_url"))


@dataclass(frozen=True)
class ShareLink:
    """A share link to a box's port: `url` carries its token and is only in the answer
    that made it; `state` is `live`, `expired` or `revoked`."""

    id: str
    box_id: str
    port: int
    state: str
    created_at: str
    expires_at: str
    revoked_at: Optional[str]
    url: Optional[str]
    host_url: Optional[str]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "ShareLink":
        return cls(
            id=data["id"], box_id=data["box_id"], port=data["port"], state=data["state"],
            created_at=data["created_at"], expires_at=data["expires_at"],
            revoked_at=data.get("revoked_at"), url=data.get("url"), host_url=data.get("host_url"),
        )


@dataclass(frozen=True)
class Message:
    """A message to the box's agent: `state` is `queued` or `delivered`; `seq` its place
    in the box's queue."""

    id: str
    seq: int
    content: str
    state: str
    created_at: str
    delivered_at: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Message":
        return cls(
            id=data["id"], seq=data["seq"], content=data["content"], state=data["state"],
            created_at=data["created_at"], delivered_at=data.get("delivered_at"), raw=data,
        )


@dataclass(frozen=True)
class EgressRecord:
    """One decision of the egress gateway about a box's outbound connection (the fields
    are in docs/security.md, "Egress"): `decision` is `allow` or `deny`, `reason` why
    (`not_allowed`, `port`, …), `via` `connect` or `direct`; a deny is written at once, an
    allow when the connection ends, with its byte counts. The rest is in `raw`."""

    time: str
    target: str
    port: int
    via: str
    decision: str
    reason: Optional[str]
    resolved: Optional[Any]
    bytes_up: int
    bytes_down: int
    duration_ms: int
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "EgressRecord":
        return cls(
            time=data["time"], target=data["target"], port=data["port"], via=data.get("via", ""),
            decision=data["decision"], reason=data.get("reason"), resolved=data.get("resolved"),
            bytes_up=data.get("bytes_up", 0), bytes_down=data.get("bytes_down", 0),
            duration_ms=data.get("duration_ms", 0), raw=data,
        )


@dataclass(frozen=True)
class EgressPage:
    """A page of the box's egress audit, oldest first; `next` is where the next page
    starts (pass it as `after`)."""

    records: List[EgressRecord]
    next: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "EgressPage":
        return cls(records=[EgressRecord.from_json(r) for r in data["records"]], next=data["next"])
