"""The answers about a box's memory beyond its files (`box.memory`): search hits, `[[links]]`
and their graph, and its history (snapshots, what one holds, diffs, restores). Each keeps
the whole answer in `raw`, as `berth.models` does, for fields newer than the SDK."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class MemoryHit:
    """One file that matched a search: its `path` below `/memory`, its `score` (BM25,
    comparable within one answer only), a `snippet` of plain text around its best match,
    and `highlights`, the `(start, end)` byte ranges of the snippet's UTF-8 that matched."""

    path: str
    score: float
    snippet: str
    highlights: List[Tuple[int, int]]

    @property
    def matched(self) -> List[str]:
        """The snippet's matched words (the highlights count bytes, not characters)."""
        text = self.snippet.encode("utf-8")
        return [text[start:end].decode("utf-8", "replace") for start, end in self.highlights]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryHit":
        return cls(
            path=data["path"], score=data["score"], snippet=data["snippet"],
            highlights=[(start, end) for start, end in data.get("highlights", [])],
        )


@dataclass(frozen=True)
class MemorySearchResults:
    """A search's hits, best first, and how many files the box's index holds."""

    query: str
    hits: List[MemoryHit]
    indexed_files: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemorySearchResults":
        return cls(
            query=data["query"], hits=[MemoryHit.from_json(h) for h in data["hits"]],
            indexed_files=data["indexed_files"], raw=data,
        )


@dataclass(frozen=True)
class MemoryLink:
    """A `[[link]]` as written (`text`, before any `|`), the file it resolves to below
    `/memory` (`target`: `[[bob]]` is `entities/bob.md`), and whether that file exists."""

    text: str
    target: str
    exists: bool

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryLink":
        return cls(text=data["text"], target=data["target"], exists=data["exists"])


@dataclass(frozen=True)
class MemoryLinks:
    """A file's `outgoing` links, and its `backlinks`: the files linking to it, sorted."""

    path: str
    outgoing: List[MemoryLink]
    backlinks: List[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryLinks":
        return cls(
            path=data["path"], outgoing=[MemoryLink.from_json(o) for o in data["outgoing"]],
            backlinks=list(data["backlinks"]), raw=data,
        )


@dataclass(frozen=True)
class MemoryNode:
    """A file of the graph; `exists` is false for a link's target not written yet."""

    path: str
    exists: bool

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryNode":
        return cls(path=data["path"], exists=data["exists"])


@dataclass(frozen=True)
class MemoryEdge:
    """`from_path` links to `to` (the API's `from`, a Python keyword)."""

    from_path: str
    to: str

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryEdge":
        return cls(from_path=data["from"], to=data["to"])


@dataclass(frozen=True)
class MemoryGraph:
    """Every file of the memory and every link target, sorted, and every link between them."""

    nodes: List[MemoryNode]
    edges: List[MemoryEdge]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryGraph":
        return cls(
            nodes=[MemoryNode.from_json(n) for n in data["nodes"]],
            edges=[MemoryEdge.from_json(e) for e in data["edges"]], raw=data,
        )


@dataclass(frozen=True)
class MemorySnapshot:
    """One snapshot of a box's `/memory`: `id` (`ms_` and its time in milliseconds, so ids
    sort as times), `taken_at` (RFC 3339), `reason` (`stop`, `request` or
    `before_restore`), its regular `files` and their `bytes`, `stored_bytes` (what it added
    to the store, compressed) and `root` (its content hash: equal roots, equal trees)."""

    id: str
    taken_at: str
    reason: str
    files: int
    bytes: int
    stored_bytes: int
    root: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemorySnapshot":
        return cls(
            id=data["id"], taken_at=data["taken_at"], reason=data["reason"],
            files=data["files"], bytes=data["bytes"], stored_bytes=data["stored_bytes"],
            root=data["root"], raw=data,
        )


@dataclass(frozen=True)
class MemorySnapshotEntry:
    """One entry a snapshot holds: `path` below `/memory`, `kind` (`file` or `dir`), `size`."""

    path: str
    kind: str
    size: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemorySnapshotEntry":
        return cls(path=data["path"], kind=data["kind"], size=data["size"])


@dataclass(frozen=True)
class MemorySnapshotTree:
    """A snapshot and every directory and file in it, by path."""

    snapshot: MemorySnapshot
    entries: List[MemorySnapshotEntry]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemorySnapshotTree":
        return cls(
            snapshot=MemorySnapshot.from_json(data["snapshot"]),
            entries=[MemorySnapshotEntry.from_json(e) for e in data["entries"]], raw=data,
        )


@dataclass(frozen=True)
class MemoryChange:
    """One file that differs: `change` is `added`, `removed` or `modified`; `patch` its
    unified diff, only when the diff was asked for one path and both sides are text of at
    most 1 MiB."""

    path: str
    change: str
    size_before: Optional[int] = None
    size_after: Optional[int] = None
    patch: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryChange":
        return cls(
            path=data["path"], change=data["change"], size_before=data.get("size_before"),
            size_after=data.get("size_after"), patch=data.get("patch"),
        )


@dataclass(frozen=True)
class MemoryDiff:
    """What changed from snapshot `from_id` to snapshot `to`, by path."""

    from_id: str
    to: str
    changes: List[MemoryChange]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryDiff":
        return cls(
            from_id=data["from"], to=data["to"],
            changes=[MemoryChange.from_json(c) for c in data["changes"]], raw=data,
        )


@dataclass(frozen=True)
class MemoryRestored:
    """What a restore did: the snapshot brought back (`restored`), the snapshot of the
    memory just before (`before`: restore it to undo this one), the `files` written back
    and the ones `removed` because the snapshot did not hold them."""

    restored: str
    before: MemorySnapshot
    files: int
    removed: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MemoryRestored":
        return cls(
            restored=data["restored"], before=MemorySnapshot.from_json(data["before"]),
            files=data["files"], removed=data["removed"], raw=data,
        )
