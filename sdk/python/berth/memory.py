"""A box's `/memory` (`box.memory`), read without waking it: a running box answers through
its agent (`source` `box`); a sleeping or stopped one from its volume image (`volume`), and
it stays as it was (its state and events untouched). Paths are below `/memory`
(`entities/alice.md`; a leading `/memory/` is taken off); symlinks are listed, never
followed.

Beyond its files: full-text search and `[[links]]` (a stopped box is searched without
waking it), and its history: snapshots (one at each stop whose memory changed, and on
request), what one holds, a diff between two, a file as one holds it, and a restore (which
writes through the box's agent, so it wakes the box). The calls are built once below and
sent by `Memory` and `AsyncMemory` alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import _api
from ._async import AsyncTransport
from ._request import Request, box_path
from ._sync import Transport
from .models_memory import (
    MemoryDiff,
    MemoryGraph,
    MemoryLinks,
    MemoryRestored,
    MemorySearchResults,
    MemorySnapshot,
    MemorySnapshotTree,
)

#: A snapshot, or its id (`ms_…`).
SnapshotRef = Union[str, MemorySnapshot]


@dataclass(frozen=True)
class MemoryEntry:
    """One entry of a box's memory: `path` below `/memory` (`entities/alice.md`), `kind`
    (`file`, `dir`, `symlink` or `other`), `size` in bytes (a symlink's: its target's
    length; a directory's: 0), `modified` seconds since the Unix epoch (`None` when read
    from a sleeping box's volume image), `target` a symlink's target, as stored."""

    path: str
    kind: str
    size: int
    modified: Optional[int] = None
    target: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryEntry":
        return cls(
            path=data["path"], kind=data["kind"], size=data["size"],
            modified=data.get("modified"), target=data.get("target"), raw=data,
        )


@dataclass(frozen=True)
class MemoryTree:
    """Every entry below a directory of `/memory`, parents before their children, names
    sorted within a directory; `source` is `box` (its agent answered) or `volume` (its
    image, the box asleep); `truncated` says the tree was too big or too deep for one
    answer, and `entries` is its start."""

    source: str
    entries: List[MemoryEntry]
    truncated: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryTree":
        return cls(
            source=data["source"],
            entries=[MemoryEntry.from_json(e) for e in data["entries"]],
            truncated=bool(data.get("truncated", False)),
            raw=data,
        )


# The calls beyond the files, as plain data (`memory_tree` and `memory_file` are `_api`'s).


def _snapshot_id(snapshot: SnapshotRef) -> str:
    return snapshot.id if isinstance(snapshot, MemorySnapshot) else snapshot


def _search(ref: str, q: str, limit: int) -> Request:
    params = [("q", q), ("limit", str(limit))]
    return Request("GET", box_path(ref, "memory", "search"), params=params, box=ref)


def _links(ref: str, path: str) -> Request:
    params = [("path", _api.memory_rel(path))]
    return Request("GET", box_path(ref, "memory", "links"), params=params, box=ref)


def _graph(ref: str) -> Request:
    return Request("GET", box_path(ref, "memory", "graph"), box=ref)


def _snapshots(ref: str, method: str) -> Request:
    return Request(method, box_path(ref, "memory", "snapshots"), box=ref)


def _snapshot_tree(ref: str, snapshot: SnapshotRef) -> Request:
    return Request("GET", box_path(ref, "memory", "snapshots", _snapshot_id(snapshot)), box=ref)


def _diff(
    ref: str, from_id: SnapshotRef, to: Optional[SnapshotRef], path: Optional[str]
) -> Request:
    params = [] if to is None else [("to", _snapshot_id(to))]
    if path is not None:
        params.append(("path", _api.memory_rel(path)))
    where = box_path(ref, "memory", "snapshots", _snapshot_id(from_id), "diff")
    return Request("GET", where, params=params, box=ref)


def _read_at(ref: str, snapshot: SnapshotRef, path: str) -> Request:
    """The file's segments quoted as `_api.memory_file` quotes them (a `..` kept, for the
    daemon to refuse), below the snapshot's `files/`."""
    segments = _api.memory_file(ref, path).path[len(box_path(ref, "memory")):]
    files = box_path(ref, "memory", "snapshots", _snapshot_id(snapshot), "files")
    return Request("GET", files + segments, box=ref)


def _restore(ref: str, snapshot: SnapshotRef, path: Optional[str]) -> Request:
    body = {"snapshot": _snapshot_id(snapshot)}
    if path is not None:
        body["path"] = _api.memory_rel(path)
    return Request("POST", box_path(ref, "memory", "restore"), json=body, box=ref)


class Memory:
    """The box's `/memory`: its files read without waking it, searched, and through time."""

    def __init__(self, transport: Transport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    def tree(self, path: str = "") -> MemoryTree:
        """The entries below the directory `path` of `/memory` (all of it by default)."""
        return MemoryTree.from_json(self._t.send(_api.memory_tree(self._box, path)).json())

    def read(self, path: str) -> bytes:
        """The bytes of the regular file `path` (at most 16 MiB, else `PayloadTooLarge`; a
        directory or a symlink is `InvalidRequest`)."""
        return self._t.send(_api.memory_file(self._box, path)).content

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def search(self, q: str, limit: int = 20) -> MemorySearchResults:
        """The files that match the words of `q` (accents folded), best first, at most
        `limit` (1–100); a stopped box is searched without waking it. A `q` without words
        is `InvalidRequest`."""
        return MemorySearchResults.from_json(self._t.send(_search(self._box, q, limit)).json())

    def links(self, path: str) -> MemoryLinks:
        """The `[[links]]` the file `path` makes, and the files linking to it (`NotFound`
        when the memory holds no such file)."""
        return MemoryLinks.from_json(self._t.send(_links(self._box, path)).json())

    def graph(self) -> MemoryGraph:
        """Every file and link target of the memory, and every link between them."""
        return MemoryGraph.from_json(self._t.send(_graph(self._box)).json())

    def snapshots(self) -> List[MemorySnapshot]:
        """The memory's snapshots, oldest first."""
        answer = self._t.send(_snapshots(self._box, "GET")).json()
        return [MemorySnapshot.from_json(s) for s in answer["snapshots"]]

    def snapshot(self) -> MemorySnapshot:
        """Takes a snapshot now, whatever the box's state (which does not change)."""
        return MemorySnapshot.from_json(self._t.send(_snapshots(self._box, "POST")).json())

    def snapshot_tree(self, snapshot: SnapshotRef) -> MemorySnapshotTree:
        """The snapshot (or its id) and every directory and file in it."""
        answer = self._t.send(_snapshot_tree(self._box, snapshot)).json()
        return MemorySnapshotTree.from_json(answer)

    def diff(
        self, from_id: SnapshotRef, to: Optional[SnapshotRef] = None, path: Optional[str] = None
    ) -> MemoryDiff:
        """What changed from snapshot `from_id` to `to` (default: the newest); with `path`,
        only below it, and a patch when that leaves one file of text."""
        return MemoryDiff.from_json(self._t.send(_diff(self._box, from_id, to, path)).json())

    def read_at(self, snapshot: SnapshotRef, path: str) -> bytes:
        """The bytes of the file `path` as the snapshot holds it."""
        return self._t.send(_read_at(self._box, snapshot, path)).content

    def read_text_at(self, snapshot: SnapshotRef, path: str, encoding: str = "utf-8") -> str:
        return self.read_at(snapshot, path).decode(encoding)

    def restore(self, snapshot: SnapshotRef, path: Optional[str] = None) -> MemoryRestored:
        """Brings back the whole memory as the snapshot held it (what it did not hold is
        removed), or only the file or directory `path`. The memory is snapshotted first
        (`before`: restore that to undo this). Writes through the box's agent: wakes it."""
        return MemoryRestored.from_json(self._t.send(_restore(self._box, snapshot, path)).json())


class AsyncMemory:
    """The box's `/memory`, as `Memory`."""

    def __init__(self, transport: AsyncTransport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    async def tree(self, path: str = "") -> MemoryTree:
        answer = await self._t.send(_api.memory_tree(self._box, path))
        return MemoryTree.from_json(answer.json())

    async def read(self, path: str) -> bytes:
        return (await self._t.send(_api.memory_file(self._box, path))).content

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def search(self, q: str, limit: int = 20) -> MemorySearchResults:
        answer = await self._t.send(_search(self._box, q, limit))
        return MemorySearchResults.from_json(answer.json())

    async def links(self, path: str) -> MemoryLinks:
        return MemoryLinks.from_json((await self._t.send(_links(self._box, path))).json())

    async def graph(self) -> MemoryGraph:
        return MemoryGraph.from_json((await self._t.send(_graph(self._box))).json())

    async def snapshots(self) -> List[MemorySnapshot]:
        answer = (await self._t.send(_snapshots(self._box, "GET"))).json()
        return [MemorySnapshot.from_json(s) for s in answer["snapshots"]]

    async def snapshot(self) -> MemorySnapshot:
        answer = await self._t.send(_snapshots(self._box, "POST"))
        return MemorySnapshot.from_json(answer.json())

    async def snapshot_tree(self, snapshot: SnapshotRef) -> MemorySnapshotTree:
        answer = await self._t.send(_snapshot_tree(self._box, snapshot))
        return MemorySnapshotTree.from_json(answer.json())

    async def diff(
        self, from_id: SnapshotRef, to: Optional[SnapshotRef] = None, path: Optional[str] = None
    ) -> MemoryDiff:
        answer = await self._t.send(_diff(self._box, from_id, to, path))
        return MemoryDiff.from_json(answer.json())

    async def read_at(self, snapshot: SnapshotRef, path: str) -> bytes:
        return (await self._t.send(_read_at(self._box, snapshot, path))).content

    async def read_text_at(
        self, snapshot: SnapshotRef, path: str, encoding: str = "utf-8"
    ) -> str:
        return (await self.read_at(snapshot, path)).decode(encoding)

    async def restore(self, snapshot: SnapshotRef, path: Optional[str] = None) -> MemoryRestored:
        answer = await self._t.send(_restore(self._box, snapshot, path))
        return MemoryRestored.from_json(answer.json())
