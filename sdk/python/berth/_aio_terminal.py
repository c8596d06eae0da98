"""An attached terminal for an asyncio program (`AsyncBox.terminal`), as
`berth.terminal.Terminal`, over the `websockets` asyncio client."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, Optional, Union

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from .errors import BerthError
from .terminal import take_control


class AsyncTerminal:
    """An attached terminal, as `Terminal`: `async for` over `read()` for its bytes."""

    def __init__(self, connection: ClientConnection) -> None:
        self._ws = connection
        self.id = ""
        self.offset = 0
        self.exit_code: Optional[int] = None
        self.detached: Optional[Any] = None

    async def _hello(self) -> None:
        hello = self._control(await self._ws.recv())
        if "id" not in hello:
            await self.close()
            raise BerthError(f"the terminal did not say hello: {hello}")
        self.id = hello["id"]
        self.offset = hello["offset"]

    async def write(self, data: Union[str, bytes]) -> None:
        await self._ws.send(data.encode("utf-8") if isinstance(data, str) else data)

    async def resize(self, cols: int, rows: int) -> None:
        await self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    async def signal(self, signal: str) -> None:
        await self._ws.send(json.dumps({"signal": signal.upper().removeprefix("SIG")}))

    async def read(self) -> AsyncIterator[bytes]:
        while self.exit_code is None and self.detached is None:
            try:
                message = await self._ws.recv()
            except ConnectionClosed:
                return
            if isinstance(message, bytes):
                self.offset += len(message)
                yield message
            else:
                self._control(message)

    async def close(self) -> None:
        """Leaves the terminal (it lives on for its grace, to be reattached)."""
        await self._ws.close()

    async def __aenter__(self) -> "AsyncTerminal":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _control(self, message: Union[str, bytes]) -> Dict[str, Any]:
        return take_control(self, message)
