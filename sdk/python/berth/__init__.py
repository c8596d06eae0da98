"""berth's Python SDK: boxes (persistent sandboxes for AI agents) on a berth daemon.

    from berth import Berth

    with Berth() as client:              # BERTH_URL / BERTH_API_KEY, or the local daemon
        box = client.boxes.create("alice")
        print(box.exec("echo hi").stdout)

The asyncio client is `berth.aio.AsyncBerth`, with the same surface. docs/sdk-python.md in
berth's repository describes every call.
"""

from .client import Berth, Box, Boxes
from .errors import (
    AuthenticationError,
    BerthError,
    BoxFailed,
    Conflict,
    InsufficientStorage,
    InternalError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    QuotaExceeded,
    Timeout,
    TooManyRequests,
    Unavailable,
    Unsupported,
)
from .models import BoxInfo, ExecResult, Limits

__all__ = [
    "AuthenticationError",
    "Berth",
    "BerthError",
    "Box",
    "BoxFailed",
    "BoxInfo",
    "Boxes",
    "Conflict",
    "ExecResult",
    "InsufficientStorage",
    "InternalError",
    "InvalidRequest",
    "Limits",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "QuotaExceeded",
    "Timeout",
    "TooManyRequests",
    "Unavailable",
    "Unsupported",
]
