"""The records of a tenant's account the API answers with: tenants with their quota and
usage, API keys, webhooks and their deliveries (typed like `models`, the whole answer in
`raw`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class Quota:
    """A tenant's limits; `None`: no limit."""

    max_boxes: Optional[int]
    max_running: Optional[int]
    max_memory_mib: Optional[int]
    max_disk_mib: Optional[int]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Quota":
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Usage:
    """What a tenant holds now, counted as its quota counts it."""

    boxes: int
    running: int
    memory_mib: int
    disk_mib: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Usage":
        return cls(**{k: data.get(k, 0) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TenantInfo:
    id: str
    name: str
    created_at: str
    quota: Quota
    usage: Usage
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TenantInfo":
        return cls(
            id=data["id"], name=data["name"], created_at=data["created_at"],
            quota=Quota.from_json(data.get("quota") or {}),
            usage=Usage.from_json(data.get("usage") or {}), raw=data,
        )


@dataclass(frozen=True)
class ApiKey:
    """An API key: `prefix` its first characters (`None` for keys older than berth's
    keeping it), `last_used_at` to the minute; `api_key`, the key itself, is only in the
    answer that made it."""

    id: str
    prefix: Optional[str]
    admin: bool
    created_at: str
    last_used_at: Optional[str]
    api_key: Optional[str] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any], api_key: Optional[str] = None) -> "ApiKey":
        return cls(
            id=data["id"], prefix=data.get("prefix"), admin=bool(data.get("admin")),
            created_at=data["created_at"], last_used_at=data.get("last_used_at"),
            api_key=api_key, raw=data,
        )


@dataclass(frozen=True)
class WebhookInfo:
    """A webhook: the `url` it posts to and the `events` it hears (`box.state_changed`,
    `box.failed`, `turn.completed`, `wakeup.fired`, `process.exited`)."""

    id: str
    url: str
    events: List[str]
    description: str
    created_at: str
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "WebhookInfo":
        return cls(
            id=data["id"], url=data["url"], events=list(data["events"]),
            description=data.get("description") or "", created_at=data["created_at"], raw=data,
        )


@dataclass(frozen=True)
class Delivery:
    """One event's delivery to a webhook: `state` is `pending` (to be tried again),
    `delivered` or `failed` (given up); `last_status` the endpoint's HTTP status,
    `last_error` why the last attempt failed."""

    id: str
    event: str
    state: str
    attempts: int
    created_at: str
    next_attempt_at: Optional[str] = None
    last_attempt_at: Optional[str] = None
    last_status: Optional[int] = None
    last_error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def delivered(self) -> bool:
        return self.state == "delivered"

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Delivery":
        return cls(
            id=data["id"], event=data["event"], state=data["state"],
            attempts=data.get("attempts", 0), created_at=data["created_at"],
            next_attempt_at=data.get("next_attempt_at"),
            last_attempt_at=data.get("last_attempt_at"),
            last_status=data.get("last_status"), last_error=data.get("last_error"), raw=data,
        )
