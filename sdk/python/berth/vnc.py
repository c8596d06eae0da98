"""A box's desktop as RFB (VNC) over a WebSocket (`box.desktop.vnc()`; `GET
/v1/boxes/{ref}/desktop/vnc`, docs/desktop.md): each binary message is some of RFB's bytes,
from the desktop's VNC server or to it, with no framing of berth's own. A program hands them
on to a VNC client (a local TCP port a viewer connects to, or noVNC in a page) and back;
berth never reads the RFB itself. Opening it wakes the box; watching does not keep it
awake, a person's input through it does. When the VNC server ends (the box stopped), the
daemon closes the connection: open a new one to go on."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from websockets.asyncio.client import ClientConnection as AsyncClientConnection
from websockets.sync.client import ClientConnection

from . import _api
from ._config import Target
from ._websocket import connect, connect_async


def vnc_path(ref: str) -> str:
    return _api.box_path(ref, "desktop", "vnc")


class VncConnection:
    """RFB's bytes to and from the box's VNC server: `send` what the VNC client says, `recv`
    what the server says. `recv` raises `websockets.exceptions.ConnectionClosed` once the
    connection ended (its `rcvd.reason` says why), `TimeoutError` past `timeout` seconds."""

    def __init__(self, connection: ClientConnection) -> None:
        self._ws = connection

    def send(self, data: bytes) -> None:
        self._ws.send(data)

    def recv(self, timeout: Optional[float] = None) -> bytes:
        while True:
            message = self._ws.recv(timeout)
            # The daemon sends only binary messages; a text one would be no RFB.
            if isinstance(message, bytes):
                return message

    def close(self) -> None:
        self._ws.close()

    def __enter__(self) -> "VncConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncVncConnection:
    """RFB's bytes to and from the box's VNC server, as `VncConnection`."""

    def __init__(self, connection: AsyncClientConnection) -> None:
        self._ws = connection

    async def send(self, data: bytes) -> None:
        await self._ws.send(data)

    async def recv(self, timeout: Optional[float] = None) -> bytes:
        while True:
            # Cancelling a receive loses no message (websockets' asyncio client).
            message = await asyncio.wait_for(self._ws.recv(), timeout)
            if isinstance(message, bytes):
                return message

    async def close(self) -> None:
        await self._ws.close()

    async def __aenter__(self) -> "AsyncVncConnection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def open_vnc(target: Target, ref: str) -> VncConnection:
    """Connects, waking the box; a refusal before the upgrade raises the API's error."""
    return VncConnection(connect(target, vnc_path(ref)))


async def open_vnc_async(target: Target, ref: str) -> AsyncVncConnection:
    return AsyncVncConnection(await connect_async(target, vnc_path(ref)))
