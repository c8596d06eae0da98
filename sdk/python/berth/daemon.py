"""The daemon itself: its health, its runtimes, and the templates boxes are made from
(`client.health()`, `client.runtimes()`, `client.templates`), in both clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import _api
from ._async import AsyncTransport
from ._sync import Transport


@dataclass(frozen=True)
class Health:
    """`status` is `ok` when the daemon answers; `version` is berth's."""

    status: str
    version: str

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Health":
        return cls(status=data["status"], version=data.get("version", ""))


@dataclass(frozen=True)
class Runtime:
    """A runtime the daemon knows, usable or not: `reason` says why not; `default` marks
    the runtime of boxes made without one; `capabilities` (`pause`, `snapshot`,
    `host_rootfs`); `details` what it runs with (`None` for a non-admin key)."""

    name: str
    available: bool
    reason: Optional[str]
    default: bool
    capabilities: Dict[str, bool]
    details: Optional[Dict[str, Any]]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Runtime":
        return cls(
            name=data["name"], available=data["available"], reason=data.get("reason"),
            default=bool(data.get("default")), capabilities=dict(data.get("capabilities") or {}),
            details=data.get("details"), raw=data,
        )


@dataclass(frozen=True)
class Template:
    """A template boxes are made from: its `base`, the `runtimes` it runs on, its
    `harness` (`None`: its boxes take no messages), its `origin` (`builtin` or a file) and
    why it is `unavailable`, if it is. The rest (limits, layers, egress, …) is in `raw`."""

    name: str
    base: str
    runtimes: List[str]
    harness: Optional[Dict[str, Any]]
    origin: str
    unavailable: Optional[str]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Template":
        return cls(
            name=data["name"], base=data["base"], runtimes=list(data.get("runtimes") or []),
            harness=data.get("harness"), origin=data.get("origin", ""),
            unavailable=data.get("unavailable"), raw=data,
        )


@dataclass(frozen=True)
class TemplateError:
    """A template file a reload skipped, and why."""

    file: str
    line: Optional[int]
    message: str

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TemplateError":
        return cls(file=data["file"], line=data.get("line"), message=data["message"])


@dataclass(frozen=True)
class TemplateReload:
    """What a reload loaded, and the files it skipped."""

    templates: List[Template]
    errors: List[TemplateError]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TemplateReload":
        return cls(
            templates=[Template.from_json(t) for t in data["templates"]],
            errors=[TemplateError.from_json(e) for e in data.get("errors") or []],
        )


def runtimes_from(data: Dict[str, Any]) -> List[Runtime]:
    return [Runtime.from_json(r) for r in data["runtimes"]]


class Templates:
    """The daemon's templates."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> List[Template]:
        answer = self._t.send(_api.list_templates()).json()
        return [Template.from_json(t) for t in answer["templates"]]

    def reload(self) -> TemplateReload:
        """Re-reads the data dir's template files (admin key); a bad file is skipped and
        reported in `errors`, the others load."""
        return TemplateReload.from_json(self._t.send(_api.reload_templates()).json())


class AsyncTemplates:
    """The daemon's templates, as `Templates`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> List[Template]:
        answer = (await self._t.send(_api.list_templates())).json()
        return [Template.from_json(t) for t in answer["templates"]]

    async def reload(self) -> TemplateReload:
        return TemplateReload.from_json((await self._t.send(_api.reload_templates())).json())
