"""What the blocking and the asyncio clients' handles show the same way, written once: a
box's, a process's, a turn's, a tenant's and a webhook's fields as last seen."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from .models import BoxInfo, Event, ProcessExit, ProcessInfo
from .models_account import Quota, TenantInfo, Usage, WebhookInfo


class BoxView:
    info: BoxInfo

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def state(self) -> str:
        return self.info.state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, id={self.id!r}, state={self.state!r})"


class ProcessView:
    info: ProcessInfo
    exit: Optional[ProcessExit]

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def pid(self) -> int:
        return self.info.pid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, argv={self.info.argv!r}, exit={self.exit!r})"


class TurnView:
    result: Optional[Event]

    @property
    def text(self) -> Optional[str]:
        """The `result`'s text, once the turn ended."""
        data: Dict[str, Any] = self.result.data if self.result else {}
        text = data.get("result")
        return text if isinstance(text, str) else None


class TenantView:
    info: TenantInfo

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def quota(self) -> Quota:
        return self.info.quota

    @property
    def usage(self) -> Usage:
        return self.info.usage

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, id={self.id!r})"


class WebhookView:
    info: WebhookInfo

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def events(self) -> List[str]:
        return self.info.events

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, url={self.url!r}, events={self.events!r})"
