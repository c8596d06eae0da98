"""Tenants, their quotas and their API keys (`client.tenants`). The admin key sees every
tenant; another key only its own (any other is `NotFound`), and admin calls refuse it
(`PermissionDenied`). A tenant is never deleted."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import httpx

from . import _api
from ._async import AsyncTransport
from ._sync import Transport
from ._views import TenantView
from .models_account import ApiKey, Quota, TenantInfo, Usage


def _keys(data: Dict[str, Any]) -> List[ApiKey]:
    return [ApiKey.from_json(k) for k in data["keys"]]


def _made_key(data: Dict[str, Any]) -> ApiKey:
    return ApiKey.from_json(data["key"], api_key=data["api_key"])


def _sessions_ended(response: httpx.Response) -> int:
    return int(response.headers.get("Berth-Web-Sessions-Ended", "0"))


class Tenants:
    """The daemon's tenants (admin key, but for `get` of the key's own)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(
        self,
        name: str,
        *,
        max_boxes: Optional[int] = None,
        max_running: Optional[int] = None,
        max_memory_mib: Optional[int] = None,
        max_disk_mib: Optional[int] = None,
    ) -> "Tenant":
        """Makes a tenant with the limits given (none: no limit); its first key is in
        the answer's `api_key`, and only there."""
        quota = dict(max_boxes=max_boxes, max_running=max_running,
                     max_memory_mib=max_memory_mib, max_disk_mib=max_disk_mib)
        answer = self._t.send(_api.create_tenant(name, quota)).json()
        return Tenant(self._t, TenantInfo.from_json(answer["tenant"]), answer["api_key"])

    def list(self) -> List["Tenant"]:
        answer = self._t.send(_api.list_tenants()).json()
        return [Tenant(self._t, TenantInfo.from_json(t)) for t in answer["tenants"]]

    def get(self, ref: str) -> "Tenant":
        """A tenant by id (`tn_…`) or name."""
        return Tenant(self._t, TenantInfo.from_json(self._t.send(_api.get_tenant(ref)).json()))


class Tenant(TenantView):
    """One tenant: `info` as last seen; `api_key` only on the one `create` answered."""

    def __init__(self, transport: Transport, info: TenantInfo, api_key: Optional[str] = None):
        self._t = transport
        self.info = info
        self.api_key = api_key
        self.keys = Keys(transport, info.id)

    def refresh(self) -> "Tenant":
        self.info = TenantInfo.from_json(self._t.send(_api.get_tenant(self.id)).json())
        return self

    def update(self, **quota: Optional[int]) -> "Tenant":
        """Sets each limit given (`max_boxes`, `max_running`, `max_memory_mib`,
        `max_disk_mib`; `None` clears it); the others stay. Lowering one below the usage
        stops or deletes nothing: it refuses what would take more."""
        self.info = TenantInfo.from_json(self._t.send(_api.update_tenant(self.id, quota)).json())
        return self


class Keys:
    """A tenant's API keys (the admin's, or the tenant's own key)."""

    def __init__(self, transport: Transport, tenant: str) -> None:
        self._t = transport
        self._tenant = tenant

    def list(self) -> List[ApiKey]:
        return _keys(self._t.send(_api.list_keys(self._tenant)).json())

    def create(self, *, admin: bool = False) -> ApiKey:
        """A new key; its `api_key` is shown only here. `admin=True` needs an admin key."""
        return _made_key(self._t.send(_api.create_key(self._tenant, admin)).json())

    def revoke(self, key_id: str) -> int:
        """Ends the key, and every web session signed in with it: answers how many. The
        last admin key is refused (`Conflict`)."""
        return _sessions_ended(self._t.send(_api.revoke_key(self._tenant, key_id)))


class AsyncTenants:
    """The daemon's tenants, as `Tenants`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(
        self,
        name: str,
        *,
        max_boxes: Optional[int] = None,
        max_running: Optional[int] = None,
        max_memory_mib: Optional[int] = None,
        max_disk_mib: Optional[int] = None,
    ) -> "AsyncTenant":
        quota = dict(max_boxes=max_boxes, max_running=max_running,
                     max_memory_mib=max_memory_mib, max_disk_mib=max_disk_mib)
        answer = (await self._t.send(_api.create_tenant(name, quota))).json()
        return AsyncTenant(self._t, TenantInfo.from_json(answer["tenant"]), answer["api_key"])

    async def list(self) -> List["AsyncTenant"]:
        answer = (await self._t.send(_api.list_tenants())).json()
        return [AsyncTenant(self._t, TenantInfo.from_json(t)) for t in answer["tenants"]]

    async def get(self, ref: str) -> "AsyncTenant":
        answer = (await self._t.send(_api.get_tenant(ref))).json()
        return AsyncTenant(self._t, TenantInfo.from_json(answer))


class AsyncTenant(TenantView):
    """One tenant, as `Tenant`."""

    def __init__(
        self, transport: AsyncTransport, info: TenantInfo, api_key: Optional[str] = None
    ) -> None:
        self._t = transport
        self.info = info
        self.api_key = api_key
        self.keys = AsyncKeys(transport, info.id)

    async def refresh(self) -> "AsyncTenant":
        self.info = TenantInfo.from_json((await self._t.send(_api.get_tenant(self.id))).json())
        return self

    async def update(self, **quota: Optional[int]) -> "AsyncTenant":
        answer = await self._t.send(_api.update_tenant(self.id, quota))
        self.info = TenantInfo.from_json(answer.json())
        return self


class AsyncKeys:
    """A tenant's API keys, as `Keys`."""

    def __init__(self, transport: AsyncTransport, tenant: str) -> None:
        self._t = transport
        self._tenant = tenant

    async def list(self) -> List[ApiKey]:
        return _keys((await self._t.send(_api.list_keys(self._tenant))).json())

    async def create(self, *, admin: bool = False) -> ApiKey:
        return _made_key((await self._t.send(_api.create_key(self._tenant, admin))).json())

    async def revoke(self, key_id: str) -> int:
        return _sessions_ended(await self._t.send(_api.revoke_key(self._tenant, key_id)))
