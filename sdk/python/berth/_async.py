"""Sending [`Request`]s with httpx's asyncio client: the async twin of `_sync.Transport`,
on the same requests and decoders (`_api`), and the same error mapping (a failed start
raised as [`BoxFailed`], with the box's reason)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Iterable, Optional

import httpx

from . import _api
from ._config import Target
from .errors import BerthError, Unavailable, error_from
from .models import BoxInfo

_END = object()


async def _chunks_in_a_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """A blocking iterable of byte chunks (a local directory's tar, a caller's generator)
    read on a worker thread, so the event loop never waits on a disk."""
    iterator = iter(chunks)
    while True:
        chunk = await asyncio.to_thread(next, iterator, _END)
        if chunk is _END:
            return
        yield chunk  # type: ignore[misc]


def _body(content: Any) -> Any:
    if content is None or isinstance(content, (bytes, bytearray)):
        return content
    if hasattr(content, "__aiter__"):
        return content
    return _chunks_in_a_thread(content)


class AsyncTransport:
    """One keep-alive connection pool to the daemon, for an asyncio program."""

    def __init__(
        self, target: Target, timeout: float, http: Optional[httpx.AsyncClient]
    ) -> None:
        self.target = target
        self.timeout = timeout
        self.http = http or httpx.AsyncClient(
            base_url=target.url,
            headers={"Authorization": f"Bearer {target.api_key}"},
            verify=target.verify,
            timeout=httpx.Timeout(timeout),
        )

    async def close(self) -> None:
        await self.http.aclose()

    def _build(self, req: _api.Request) -> httpx.Request:
        timeout = httpx.Timeout(self.timeout, read=None) if req.unbounded else None
        return self.http.build_request(
            req.method,
            req.path,
            params=req.params,
            json=req.json,
            content=_body(req.content),
            headers=req.headers,
            **({"timeout": timeout} if timeout else {}),
        )

    async def send(self, req: _api.Request) -> httpx.Response:
        """The whole answer of a call; an error answer raised."""
        response = await self.http.send(self._build(req))
        if response.is_error:
            raise await self._error(req, response.status_code, response.content)
        return response

    async def answer(self, req: _api.Request) -> httpx.Response:
        """The whole answer of a call, whatever its status (an app's, through a port)."""
        return await self.http.send(self._build(req))

    @contextlib.asynccontextmanager
    async def stream(self, req: _api.Request) -> AsyncIterator[httpx.Response]:
        """An answer whose body is read as it comes; closed (and so, for an exec, the
        process killed) when the block ends."""
        response = await self.http.send(self._build(req), stream=True)
        try:
            if response.is_error:
                raise await self._error(req, response.status_code, await response.aread())
            yield response
        finally:
            await response.aclose()

    async def _error(self, req: _api.Request, status: int, body: bytes) -> BerthError:
        error = error_from(status, body)
        if isinstance(error, Unavailable) and req.box is not None:
            return await self._failed_start(req.box, error)
        return error

    async def _failed_start(self, ref: str, error: Unavailable) -> BerthError:
        try:
            answer = await self.send(_api.get_box(ref))
            box: Optional[BoxInfo] = BoxInfo.from_json(answer.json())
        except BerthError:
            box = None
        return _api.failed_start(error, box)
