"""Computer use on a box whose template has a desktop (`box.desktop`; docs/desktop.md): its
status, a screenshot, pointer and keyboard actions, the pointer's place, and its screen over
VNC (`vnc()`). Each call wakes the box and waits (up to 300 s) for its desktop's services; a
box without a desktop is `Conflict`, before anything wakes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence

from . import _api
from ._async import AsyncTransport
from ._sync import Transport
from .vnc import AsyncVncConnection, VncConnection, open_vnc, open_vnc_async

Action = Mapping[str, Any]


@dataclass(frozen=True)
class DesktopStatus:
    """The box's X `display` (`:0`) and screen size; `ready` when every desktop service it
    has (`xvfb`, `xfce`, `vnc`) runs; `ready_after_ms` from its boot's start to the last of
    them ready (`None` when unknown, e.g. a boot restored from a snapshot)."""

    display: str
    width: int
    height: int
    ready: bool
    ready_after_ms: Optional[int]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "DesktopStatus":
        return cls(
            display=data["display"], width=data["width"], height=data["height"],
            ready=bool(data["ready"]), ready_after_ms=data.get("ready_after_ms"), raw=data,
        )


@dataclass(frozen=True)
class Cursor:
    """Where the mouse pointer is, in pixels from the screen's top left corner."""

    x: int
    y: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Cursor":
        return cls(x=data["x"], y=data["y"])


class Desktop:
    """The box's desktop."""

    def __init__(self, transport: Transport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    def status(self) -> DesktopStatus:
        return DesktopStatus.from_json(self._t.send(_api.desktop_status(self._box)).json())

    def screenshot(self, *, cursor: bool = False) -> bytes:
        """A PNG of the whole screen (with the pointer drawn in when `cursor`)."""
        return self._t.send(_api.desktop_screenshot(self._box, cursor)).content

    def actions(self, actions: Sequence[Action]) -> Cursor:
        """Runs the actions in order (at most 100; each a dict by its `type`: `move`,
        `click`, `double_click`, `triple_click`, `mouse_down`, `mouse_up`, `drag`, `scroll`,
        `type`, `key`, `hold_key`, `wait`); answers where the pointer is after the last.
        A refused action is `InvalidRequest` before anything runs; a failed one `Conflict`,
        with its `index` and the program's `stderr` in `details`."""
        answer = self._t.send(_api.desktop_actions(self._box, actions)).json()
        return Cursor.from_json(answer["cursor"])

    def cursor(self) -> Cursor:
        return Cursor.from_json(self._t.send(_api.desktop_cursor(self._box)).json())

    def vnc(self) -> VncConnection:
        """The screen as RFB over a WebSocket, to forward to a VNC client or noVNC (a person
        watching or taking over); wakes the box."""
        return open_vnc(self._t.target, self._box)


class AsyncDesktop:
    """The box's desktop, as `Desktop`."""

    def __init__(self, transport: AsyncTransport, box_id: str) -> None:
        self._t = transport
        self._box = box_id

    async def status(self) -> DesktopStatus:
        answer = await self._t.send(_api.desktop_status(self._box))
        return DesktopStatus.from_json(answer.json())

    async def screenshot(self, *, cursor: bool = False) -> bytes:
        return (await self._t.send(_api.desktop_screenshot(self._box, cursor))).content

    async def actions(self, actions: Sequence[Action]) -> Cursor:
        answer = await self._t.send(_api.desktop_actions(self._box, actions))
        return Cursor.from_json(answer.json()["cursor"])

    async def cursor(self) -> Cursor:
        return Cursor.from_json((await self._t.send(_api.desktop_cursor(self._box))).json())

    async def vnc(self) -> AsyncVncConnection:
        return await open_vnc_async(self._t.target, self._box)
