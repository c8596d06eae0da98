"""Sending [`Request`]s with httpx's blocking client, and turning error answers into
exceptions (a failed start into [`BoxFailed`], with the box's reason)."""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import httpx

from . import _api
from ._config import Target
from .errors import BerthError, Unavailable, error_from
from .models import BoxInfo


class Transport:
    """One keep-alive connection pool to the daemon (docs/api.md asks clients to reuse
    connections rather than open one per call)."""

    def __init__(self, target: Target, timeout: float, http: Optional[httpx.Client]) -> None:
        self.target = target
        self.timeout = timeout
        self.http = http or httpx.Client(
            base_url=target.url,
            headers={"Authorization": f"Bearer {target.api_key}"},
            verify=target.verify,
            timeout=httpx.Timeout(timeout),
        )

    def close(self) -> None:
        self.http.close()

    def _build(self, req: _api.Request) -> httpx.Request:
        timeout = httpx.Timeout(self.timeout, read=None) if req.unbounded else None
        return self.http.build_request(
            req.method,
            req.path,
            params=req.params,
            json=req.json,
            content=req.content,
            headers=req.headers,
            **({"timeout": timeout} if timeout else {}),
        )

    def send(self, req: _api.Request) -> httpx.Response:
        """The whole answer of a call; an error answer raised."""
        response = self.http.send(self._build(req))
        if response.is_error:
            raise self._error(req, response.status_code, response.content)
        return response

    def answer(self, req: _api.Request) -> httpx.Response:
        """The whole answer of a call, whatever its status (an app's, through a port)."""
        return self.http.send(self._build(req))

    @contextlib.contextmanager
    def stream(self, req: _api.Request) -> Iterator[httpx.Response]:
        """An answer whose body is read as it comes; closed (and so, for an exec, the
        process killed) when the block ends."""
        response = self.http.send(self._build(req), stream=True)
        try:
            if response.is_error:
                raise self._error(req, response.status_code, response.read())
            yield response
        finally:
            response.close()

    def _error(self, req: _api.Request, status: int, body: bytes) -> BerthError:
        error = error_from(status, body)
        if isinstance(error, Unavailable) and req.box is not None:
            return self._failed_start(req.box, error)
        return error

    def _failed_start(self, ref: str, error: Unavailable) -> BerthError:
        try:
            box: Optional[BoxInfo] = BoxInfo.from_json(self.send(_api.get_box(ref)).json())
        except BerthError:
            box = None
        return _api.failed_start(error, box)
