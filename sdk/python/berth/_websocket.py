"""How the SDK opens its WebSockets (a terminal, a desktop's VNC), for the blocking and the
asyncio client alike: the daemon's URL as `ws://` or `wss://`, its TLS trust, the API key
as the same header as every call, and an upgrade the daemon refused raised as the API's
error (its JSON answer), not as the WebSocket library's."""

from __future__ import annotations

import ssl
from typing import Optional, Sequence, Tuple
from urllib.parse import urlencode

from websockets.asyncio import client as asyncio_client
from websockets.exceptions import InvalidStatus
from websockets.sync import client as sync_client

from ._config import Target
from .errors import BerthError, error_from

Params = Sequence[Tuple[str, str]]


def ws_url(target: Target, path: str, params: Params = ()) -> str:
    base = "ws" + target.url[len("http"):] if target.url.startswith("http") else target.url
    query = f"?{urlencode(params)}" if params else ""
    return f"{base}{path}{query}"


def ssl_context(target: Target) -> Optional[ssl.SSLContext]:
    if not target.url.startswith("https://"):
        return None
    if isinstance(target.verify, str):
        return ssl.create_default_context(cafile=target.verify)
    return ssl.create_default_context()


def connect(target: Target, path: str, params: Params = ()) -> sync_client.ClientConnection:
    try:
        return sync_client.connect(
            ws_url(target, path, params),
            additional_headers={"Authorization": f"Bearer {target.api_key}"},
            ssl=ssl_context(target),
            max_size=None,
        )
    except InvalidStatus as refused:
        raise refusal(refused) from None


async def connect_async(
    target: Target, path: str, params: Params = ()
) -> asyncio_client.ClientConnection:
    try:
        return await asyncio_client.connect(
            ws_url(target, path, params),
            additional_headers={"Authorization": f"Bearer {target.api_key}"},
            ssl=ssl_context(target),
            max_size=None,
        )
    except InvalidStatus as refused:
        raise refusal(refused) from None


def refusal(refused: InvalidStatus) -> BerthError:
    """The API's error of an upgrade the daemon answered with its JSON error instead."""
    return error_from(refused.response.status_code, bytes(refused.response.body or b""))
