"""berth's errors as exceptions.

Every error answer of the API is `{"error":{"code","message"}}` (docs/api.md, "Conventions");
[`error_from`] turns one into the exception of its code, so a caller catches `NotFound`
rather than comparing strings. A code this SDK does not know (a newer daemon's) is a plain
`BerthError` with the code kept.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class BerthError(Exception):
    """An error answer of the API: its HTTP `status`, `code`, `message` and `details`."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "unknown",
        status: Optional[int] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.status else self.message


class InvalidRequest(BerthError):
    """`400`: a malformed call, or a file call on the wrong kind of path."""


class AuthenticationError(BerthError):
    """`401 unauthorized`: a missing or wrong API key."""


class PermissionDenied(BerthError):
    """`403 permission_denied`: the box user may not touch that path, or an admin call."""


class QuotaExceeded(BerthError):
    """`403 quota_exceeded`: `details` names the `limit`, its `max`, `usage` and `requested`."""


class NotFound(BerthError):
    """`404 not_found`: no such box, file, process or link."""


class Conflict(BerthError):
    """`409`: the name exists (`already_exists`), a directory is not empty (`not_empty`),
    or the box is in the wrong state for the call (`conflict`)."""


class PayloadTooLarge(BerthError):
    """`413 payload_too_large`."""


class TooManyRequests(BerthError):
    """`429 too_many_requests`: a limit of calls at once; retry after a second."""


class Unsupported(BerthError):
    """`501 unsupported`: the box's runtime cannot do this."""


class Unavailable(BerthError):
    """`502`/`503 unavailable`: the daemon or the box's agent could not serve the call."""


class BoxFailed(Unavailable):
    """The box could not be started and is now `failed`: `reason` is its `state_reason`,
    `failure` the failed transition's record (`transition`, `step`, `cause`, `hint`)."""

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str],
        failure: Optional[Dict[str, Any]],
        status: Optional[int] = None,
    ) -> None:
        super().__init__(message, code="unavailable", status=status)
        self.reason = reason
        self.failure = failure


class Timeout(BerthError):
    """`504 timeout`: the box's agent (or the app on a port) did not answer in time."""


class InsufficientStorage(BerthError):
    """`507 insufficient_storage`: the data dir's disk is below its free-space threshold."""


class InternalError(BerthError):
    """`500 internal`: a bug or a host failure (the cause is in the daemon's log)."""


_BY_CODE: Dict[str, Type[BerthError]] = {
    "invalid_request": InvalidRequest,
    "is_a_directory": InvalidRequest,
    "not_a_directory": InvalidRequest,
    "not_a_regular_file": InvalidRequest,
    "duplicate_session_cookie": InvalidRequest,
    "unauthorized": AuthenticationError,
    "permission_denied": PermissionDenied,
    "bad_origin": PermissionDenied,
    "quota_exceeded": QuotaExceeded,
    "not_found": NotFound,
    "already_exists": Conflict,
    "not_empty": Conflict,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "too_many_requests": TooManyRequests,
    "unsupported": Unsupported,
    "unavailable": Unavailable,
    "timeout": Timeout,
    "insufficient_storage": InsufficientStorage,
    "internal": InternalError,
}


def error_for(code: str, message: str, status: Optional[int] = None,
              details: Optional[Dict[str, Any]] = None) -> BerthError:
    """The exception of an error `code` (also used for an error frame inside a stream)."""
    cls = _BY_CODE.get(code, BerthError)
    return cls(message, code=code, status=status, details=details)


def error_from(status: int, body: bytes) -> BerthError:
    """The exception of an error answer: its JSON body's code, or, for a body that is not
    berth's error shape (a proxy in between), the status with the body's text."""
    try:
        detail = json.loads(body)["error"]
        return error_for(
            str(detail["code"]), str(detail["message"]), status, detail.get("details")
        )
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:500]
        return error_for("unknown", text or f"HTTP {status}", status)
