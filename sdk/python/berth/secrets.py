"""The tenant's secrets: the credentials the egress gateway sets on its boxes' requests
(`client.secrets`). No answer carries a value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import httpx

from . import _api
from ._async import AsyncTransport
from ._sync import Transport


@dataclass(frozen=True)
class Secret:
    """A secret's name and times (RFC 3339; a replaced value keeps `created_at`).
    `created` tells, in the answer of `set`, whether it made the secret (`False`: it
    replaced a value); `None` in a listing."""

    name: str
    created_at: str
    updated_at: str
    created: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Dict[str, Any], created: Optional[bool] = None) -> "Secret":
        return cls(
            name=data["name"], created_at=data["created_at"], updated_at=data["updated_at"],
            created=created, raw=data,
        )


def _set(response: httpx.Response) -> Secret:
    return Secret.from_json(response.json(), created=response.status_code == 201)


def _listed(data: Dict[str, Any]) -> List[Secret]:
    return [Secret.from_json(s) for s in data["secrets"]]


class Secrets:
    """The tenant's secrets."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def set(self, name: str, value: str) -> Secret:
        """Makes the secret, or replaces its value. A name is `[a-z0-9][a-z0-9_-]{0,62}`;
        a value 1 to 8192 bytes of visible ASCII, spaces inside only."""
        return _set(self._t.send(_api.set_secret(name, value)))

    def list(self) -> List[Secret]:
        """The tenant's secrets, by name."""
        return _listed(self._t.send(_api.list_secrets()).json())

    def delete(self, name: str) -> None:
        self._t.send(_api.delete_secret(name))


class AsyncSecrets:
    """The tenant's secrets, as `Secrets`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def set(self, name: str, value: str) -> Secret:
        return _set(await self._t.send(_api.set_secret(name, value)))

    async def list(self) -> List[Secret]:
        return _listed((await self._t.send(_api.list_secrets())).json())

    async def delete(self, name: str) -> None:
        await self._t.send(_api.delete_secret(name))
