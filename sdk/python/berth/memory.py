"""A box's `/memory` read without waking it (`box.memory`): a running box answers through
its agent (`source` `box`); a sleeping or stopped one from its volume image (`volume`), and
it stays as it was (its state and events untouched). Paths are below `/memory`
(`entities/alice.md`; a leading `/memory/` is taken off); symlinks are listed, never
followed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import _api
from ._async import AsyncTransport
from ._sync import Transport


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


class Memory:
    """The box's `/memory`, read without waking it."""

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
