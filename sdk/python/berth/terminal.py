"""A terminal in a box (blocking client): `GET /v1/boxes/{ref}/pty` upgraded to a
WebSocket, with binary frames for the terminal's bytes both ways and JSON text frames for
control (docs/api.md, "Terminals")."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from . import _api
from ._config import Target
from ._websocket import connect
from .errors import BerthError, error_for


def pty_params(
    cmd: Optional[_api.Command],
    cols: int,
    rows: int,
    user: Optional[str],
    cwd: Optional[str],
    env: Optional[Dict[str, str]],
    attach: Optional[Tuple[str, Optional[int]]],
) -> List[Tuple[str, str]]:
    """The query of a new terminal, or of a reattach to `attach` (its id and offset)."""
    params = [("cols", str(cols)), ("rows", str(rows))]
    if attach is not None:
        terminal_id, offset = attach
        params.append(("id", terminal_id))
        if offset is not None:
            params.append(("offset", str(offset)))
        return params
    params += [("cmd", part) for part in (_api.argv(cmd) if cmd is not None else [])]
    params += [(k, v) for k, v in (("user", user), ("cwd", cwd)) if v is not None]
    params += [("env", f"{k}={v}") for k, v in (env or {}).items()]
    return params


class Terminal:
    """An attached terminal: `write` keys, `resize` the window, `signal` its foreground
    job, and iterate `read()` for the screen's bytes until the program exits (then
    `exit_code` is set) or another client attaches (`detached` says why). `id` and
    `offset` (of the next byte to read) reattach with `box.terminal(attach=…)`."""

    def __init__(self, connection: ClientConnection, owner: contextlib.ExitStack) -> None:
        self._ws = connection
        self._owner = owner
        hello = self._control(self._ws.recv())
        if "id" not in hello:
            raise BerthError(f"the terminal did not say hello: {hello}")
        self.id: str = hello["id"]
        self.offset: int = hello["offset"]
        self.exit_code: Optional[int] = None
        self.detached: Optional[Any] = None

    def write(self, data: Union[str, bytes]) -> None:
        self._ws.send(data.encode("utf-8") if isinstance(data, str) else data)

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    def signal(self, signal: str) -> None:
        self._ws.send(json.dumps({"signal": signal.upper().removeprefix("SIG")}))

    def read(self) -> Iterator[bytes]:
        """The terminal's output as it comes, until its end."""
        while self.exit_code is None and self.detached is None:
            try:
                message = self._ws.recv()
            except ConnectionClosed:
                return
            if isinstance(message, bytes):
                self.offset += len(message)
                yield message
            else:
                self._control(message)

    def close(self) -> None:
        """Leaves the terminal (it lives on for its grace, to be reattached)."""
        self._owner.close()

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _control(self, message: Union[str, bytes]) -> Dict[str, Any]:
        return take_control(self, message)


def take_control(terminal: Any, message: Union[str, bytes]) -> Dict[str, Any]:
    """Reads a control frame into `terminal` (either client's): its `exit_code` or why it
    was `detached`; an error frame raised."""
    if isinstance(message, bytes):
        raise BerthError("the terminal sent output before its hello")
    control = json.loads(message)
    if "exit" in control:
        terminal.exit_code = control["exit"]["code"]
    elif "detached" in control:
        terminal.detached = control["detached"]
    elif "error" in control:
        error = control["error"]
        raise error_for(error.get("code", "unknown"), error.get("message", ""))
    return control


def open_terminal(target: Target, ref: str, params: List[Tuple[str, str]]) -> Terminal:
    """Connects; a refusal before the upgrade raises the API's error."""
    owner = contextlib.ExitStack()
    connection = owner.enter_context(connect(target, _api.box_path(ref, "pty"), params))
    return Terminal(connection, owner)
