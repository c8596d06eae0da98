"""What backing a box up and restoring it answer (`box.backup`, `client.boxes.restore`):
the local file a backup was written to, and what a restore made, with the box the backup
was taken of (the whole answer in `raw`, as `berth.models` keeps it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Generic, List, TypeVar

#: The restored box's handle: `Box`, or `AsyncBox` from the asyncio client.
B = TypeVar("B")


@dataclass(frozen=True)
class BackupFile:
    """A backup written whole to a local file: its `path` and its size in `bytes`."""

    path: Path
    bytes: int


@dataclass(frozen=True)
class BackupOrigin:
    """The box a backup was taken of: its id (`bx_…`), name and tenant then, when the
    backup was taken (`created_at`, RFC 3339), and the berth version that took it."""

    box_id: str
    name: str
    tenant: str
    created_at: str
    berth_version: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "BackupOrigin":
        return cls(
            box_id=data["box_id"], name=data["name"], tenant=data["tenant"],
            created_at=data["created_at"], berth_version=data["berth_version"], raw=data,
        )


@dataclass(frozen=True)
class RestoredBackup(Generic[B]):
    """What a restore made: the new `box` (a handle, as `create` answers; `stopped`, with a
    new id), the box the backup was taken of (`from_box`: the API's `from`, a Python
    keyword), the `volume_bytes` restored, the `memory_snapshots` restored with them, and
    `notes`: what of the backed-up box could not be kept (a sleep rung the runtime cannot
    do)."""

    box: B
    from_box: BackupOrigin
    volume_bytes: int
    memory_snapshots: int
    notes: List[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any], box: B) -> "RestoredBackup[B]":
        """`box` is the client's handle of `data["box"]`."""
        return cls(
            box=box, from_box=BackupOrigin.from_json(data["from"]),
            volume_bytes=data["volume_bytes"], memory_snapshots=data["memory_snapshots"],
            notes=list(data.get("notes") or []), raw=data,
        )
