"""The web app's sign-ins, seen from a key (`client.web`): pairing links that sign a
browser in as a tenant, and the tenant's web sessions. Signing in and out is the
browser's (with its cookie), not this SDK's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import _api
from ._async import AsyncTransport
from ._sync import Transport


@dataclass(frozen=True)
class Pairing:
    """A one-time sign-in link: open `url` in a browser (the `code` is in its fragment)
    before `expires_at`."""

    code: str
    url: str
    expires_at: str

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Pairing":
        return cls(code=data["code"], url=data["url"], expires_at=data["expires_at"])


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser: `opened_with` is `pairing`, `api_key` (with its
    `api_key_id`) or `unknown` (signed in before berth recorded it)."""

    id: str
    tenant: str
    device: Optional[str]
    created_at: str
    last_used_at: Optional[str]
    opened_with: Optional[str]
    api_key_id: Optional[str]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "WebSession":
        return cls(
            id=data["id"], tenant=data["tenant"], device=data.get("device"),
            created_at=data["created_at"], last_used_at=data.get("last_used_at"),
            opened_with=data.get("opened_with"), api_key_id=data.get("api_key_id"), raw=data,
        )


def _sessions(data: Dict[str, Any]) -> List[WebSession]:
    return [WebSession.from_json(s) for s in data["sessions"]]


class Web:
    """Pairing links and the tenant's web sessions."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def pair(self, *, tenant: Optional[str] = None, ttl_s: Optional[int] = None) -> Pairing:
        """A link that signs one browser in as the key's tenant (the admin may name
        another `tenant`), usable once within `ttl_s` (10 to 3600; 600 by default)."""
        return Pairing.from_json(self._t.send(_api.pair(tenant, ttl_s)).json())

    def sessions(self) -> List[WebSession]:
        """The tenant's web sessions, most recently used first."""
        return _sessions(self._t.send(_api.list_web_sessions()).json())

    def revoke(self, session_id: str) -> None:
        """Ends a web session: its cookie is refused from the next request on."""
        self._t.send(_api.revoke_web_session(session_id))


class AsyncWeb:
    """Pairing links and web sessions, as `Web`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def pair(self, *, tenant: Optional[str] = None, ttl_s: Optional[int] = None) -> Pairing:
        return Pairing.from_json((await self._t.send(_api.pair(tenant, ttl_s))).json())

    async def sessions(self) -> List[WebSession]:
        return _sessions((await self._t.send(_api.list_web_sessions())).json())

    async def revoke(self, session_id: str) -> None:
        await self._t.send(_api.revoke_web_session(session_id))
