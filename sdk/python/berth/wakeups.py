"""A box's wakeups: messages to its agent scheduled for later (`box.wakeups`), once at a
time, once after a delay, or at every match of a cron expression."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Union

from . import _api
from ._async import AsyncTransport
from ._sync import Transport

When = Union[str, datetime]


@dataclass(frozen=True)
class Wakeup:
    """A message scheduled for the box: `kind` is `at`, `in` or `cron` (with `cron` and
    `tz`); `fired` counts a cron's slots so far, `skipped` those a box's own wakeup lost to
    its hourly limit; `created_by` is `api` or `box`."""

    id: str
    box_id: str
    message: str
    kind: str
    next_due_at: Optional[str]
    fired: int
    skipped: int
    created_by: str
    created_at: str
    cron: Optional[str] = None
    tz: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Wakeup":
        return cls(
            id=data["id"], box_id=data["box_id"], message=data["message"], kind=data["kind"],
            next_due_at=data.get("next_due_at"), fired=data.get("fired", 0),
            skipped=data.get("skipped", 0), created_by=data.get("created_by", "api"),
            created_at=data["created_at"], cron=data.get("cron"), tz=data.get("tz"), raw=data,
        )


def _schedule(
    at: Optional[When], in_s: Optional[int], cron: Optional[str], tz: Optional[str]
) -> Dict[str, Any]:
    return {
        "at": at.isoformat() if isinstance(at, datetime) else at,
        "in_s": in_s, "cron": cron, "tz": tz,
    }


def _listed(data: Dict[str, Any]) -> List[Wakeup]:
    return [Wakeup.from_json(w) for w in data["wakeups"]]


class Wakeups:
    """The box's pending wakeups (its harness takes the messages)."""

    def __init__(self, transport: Transport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    def create(
        self,
        message: str,
        *,
        at: Optional[When] = None,
        in_s: Optional[int] = None,
        cron: Optional[str] = None,
        tz: Optional[str] = None,
    ) -> Wakeup:
        """Schedules `message` with exactly one of `at` (a time with its zone, RFC 3339
        or a datetime), `in_s` (seconds from now) or `cron` (5 fields, in `tz`, UTC by
        default). Each slot posts the message and wakes the box."""
        request = _api.create_wakeup(self._box, message, _schedule(at, in_s, cron, tz))
        return Wakeup.from_json(self._t.send(request).json())

    def list(self) -> List[Wakeup]:
        """The pending wakeups, soonest first."""
        return _listed(self._t.send(_api.list_wakeups(self._box)).json())

    def delete(self, wakeup_id: str) -> Wakeup:
        """Cancels a wakeup (its slots not yet fired never fire); answers it as it was."""
        return Wakeup.from_json(self._t.send(_api.delete_wakeup(self._box, wakeup_id)).json())


class AsyncWakeups:
    """The box's wakeups, as `Wakeups`."""

    def __init__(self, transport: AsyncTransport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    async def create(
        self,
        message: str,
        *,
        at: Optional[When] = None,
        in_s: Optional[int] = None,
        cron: Optional[str] = None,
        tz: Optional[str] = None,
    ) -> Wakeup:
        request = _api.create_wakeup(self._box, message, _schedule(at, in_s, cron, tz))
        return Wakeup.from_json((await self._t.send(request)).json())

    async def list(self) -> List[Wakeup]:
        return _listed((await self._t.send(_api.list_wakeups(self._box))).json())

    async def delete(self, wakeup_id: str) -> Wakeup:
        answer = await self._t.send(_api.delete_wakeup(self._box, wakeup_id))
        return Wakeup.from_json(answer.json())
