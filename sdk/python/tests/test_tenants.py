"""Tenants, their quotas and their keys. Tenants are never deleted: each test makes its own
under a unique name (`make_tenant`), whose keys are revoked after it."""

import httpx
import pytest

from berth import AuthenticationError, Berth, Conflict, NotFound, PermissionDenied


def test_a_tenant_is_made_listed_and_its_limits_changed(client, make_tenant):
    tenant = make_tenant(max_boxes=3, max_memory_mib=4096)
    name = tenant.name
    assert tenant.name == name and tenant.id.startswith("tn_")
    assert tenant.api_key and tenant.api_key.startswith("berth_")
    assert tenant.quota.max_boxes == 3 and tenant.quota.max_running is None
    assert tenant.usage.boxes == 0

    assert name.startswith("sdk-tn-") and name in [t.name for t in client.tenants.list()]
    assert client.tenants.get(tenant.id).name == name
    with pytest.raises(Conflict):
        client.tenants.create(name)

    # Only the limits named change; None clears one.
    tenant.update(max_running=1, max_boxes=None)
    assert (tenant.quota.max_boxes, tenant.quota.max_running) == (None, 1)
    assert tenant.quota.max_memory_mib == 4096
    assert client.tenants.get(name).quota == tenant.quota
    assert tenant.refresh().quota.max_running == 1


def test_a_tenants_key_sees_only_its_tenant(client, make_tenant):
    tenant = make_tenant()
    name = tenant.name
    with Berth(client.url, tenant.api_key) as own:
        mine = own.tenants.get(name)
        assert mine.id == tenant.id
        with pytest.raises(NotFound):
            own.tenants.get("default")  # another tenant: not found, never forbidden
        with pytest.raises(PermissionDenied):
            own.tenants.list()  # an admin call
        with pytest.raises(PermissionDenied):
            mine.keys.create(admin=True)

        # The tenant's own key manages its keys: a second one, then the first revoked.
        second = mine.keys.create()
        assert second.api_key and not second.admin and second.api_key.startswith(second.prefix)
        listed = {k.id: k for k in mine.keys.list()}
        assert second.id in listed and len(listed) == 2
        assert listed[second.id].api_key is None  # shown only when made
    # A browser signed in with the first key is signed out with it.
    with httpx.Client(base_url=client.url) as browser:
        signed_in = browser.post("/v1/web/sessions", json={"api_key": tenant.api_key})
        assert signed_in.status_code == 201, signed_in.text
    first = next(k for k in tenant.keys.list() if k.id != second.id)
    assert tenant.keys.revoke(first.id) == 1
    with Berth(client.url, tenant.api_key) as revoked:
        with pytest.raises(AuthenticationError):
            revoked.tenants.get(name)
    with Berth(client.url, second.api_key) as current:
        assert [k.id for k in current.tenants.get(name).keys.list()] == [second.id]
