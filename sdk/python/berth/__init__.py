"""berth's Python SDK: boxes (persistent sandboxes for AI agents) on a berth daemon.

    from berth import Berth

    with Berth() as client:              # BERTH_URL / BERTH_API_KEY, or the local daemon
        box = client.boxes.create("alice")
        print(box.exec("echo hi").stdout)

The asyncio client is `berth.aio.AsyncBerth`, with the same surface. docs/sdk-python.md in
berth's repository describes every call.
"""

from .client import Berth, Box, Boxes
from .daemon import Health, Runtime, Template
from .desktop import Cursor, Desktop, DesktopStatus
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
from .memory import Memory, MemoryEntry, MemoryTree
from .models_memory import (
    MemoryChange,
    MemoryDiff,
    MemoryEdge,
    MemoryGraph,
    MemoryHit,
    MemoryLink,
    MemoryLinks,
    MemoryNode,
    MemoryRestored,
    MemorySearchResults,
    MemorySnapshot,
    MemorySnapshotEntry,
    MemorySnapshotTree,
)
from .models_backup import BackupFile, BackupOrigin, RestoredBackup
from .models import (
    BoxInfo,
    EgressPage,
    EgressRecord,
    Event,
    ExecResult,
    Limits,
    Message,
    OutputChunk,
    ServiceInfo,
)
from .secrets import Secret
from .tenants import ApiKey, Quota, Tenant, Usage
from .vnc import VncConnection
from .wakeups import Wakeup
from .web import Pairing, WebSession
from .webhooks import Delivery, Webhook

__all__ = [
    "ApiKey",
    "AuthenticationError",
    "BackupFile",
    "BackupOrigin",
    "Berth",
    "BerthError",
    "Box",
    "BoxFailed",
    "BoxInfo",
    "Boxes",
    "Conflict",
    "Cursor",
    "Delivery",
    "Desktop",
    "DesktopStatus",
    "EgressPage",
    "EgressRecord",
    "Event",
    "ExecResult",
    "Health",
    "InsufficientStorage",
    "InternalError",
    "InvalidRequest",
    "Limits",
    "Memory",
    "MemoryChange",
    "MemoryDiff",
    "MemoryEdge",
    "MemoryEntry",
    "MemoryGraph",
    "MemoryHit",
    "MemoryLink",
    "MemoryLinks",
    "MemoryNode",
    "MemoryRestored",
    "MemorySearchResults",
    "MemorySnapshot",
    "MemorySnapshotEntry",
    "MemorySnapshotTree",
    "MemoryTree",
    "Message",
    "NotFound",
    "OutputChunk",
    "Pairing",
    "PayloadTooLarge",
    "PermissionDenied",
    "Quota",
    "QuotaExceeded",
    "RestoredBackup",
    "Runtime",
    "Secret",
    "ServiceInfo",
    "Template",
    "Tenant",
    "Timeout",
    "TooManyRequests",
    "Unavailable",
    "Unsupported",
    "Usage",
    "VncConnection",
    "Wakeup",
    "WebSession",
    "Webhook",
]
