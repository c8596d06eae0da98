"""The calls about the daemon and the tenant rather than one box, as plain data (no I/O):
health, runtimes, templates, secrets, tenants and their keys, webhooks, web pairings and
sessions. `_api` re-exports each, so the clients reach every call there."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ._request import Request, drop_none, path


# The daemon: health, runtimes, templates, secrets


def health() -> Request:
    return Request("GET", "/v1/health")


def runtimes() -> Request:
    return Request("GET", "/v1/runtimes")


def list_templates() -> Request:
    return Request("GET", "/v1/templates")


def reload_templates() -> Request:
    return Request("POST", "/v1/templates/reload")


def set_secret(name: str, value: str) -> Request:
    return Request("POST", "/v1/secrets", json={"name": name, "value": value})


def list_secrets() -> Request:
    return Request("GET", "/v1/secrets")


def delete_secret(name: str) -> Request:
    return Request("DELETE", path("secrets", name))


# Tenants and their keys


def create_tenant(name: str, quota: Mapping[str, Any]) -> Request:
    return Request("POST", "/v1/tenants", json={"name": name, **quota})


def list_tenants() -> Request:
    return Request("GET", "/v1/tenants")


def get_tenant(ref: str) -> Request:
    return Request("GET", path("tenants", ref))


def update_tenant(ref: str, quota: Mapping[str, Any]) -> Request:
    """Each limit given is set (`None` clears it); the others stay."""
    return Request("PATCH", path("tenants", ref), json=dict(quota))


def list_keys(tenant: str) -> Request:
    return Request("GET", path("tenants", tenant, "keys"))


def create_key(tenant: str, admin: bool) -> Request:
    return Request("POST", path("tenants", tenant, "keys"), json={"admin": True} if admin else None)


def revoke_key(tenant: str, key_id: str) -> Request:
    return Request("DELETE", path("tenants", tenant, "keys", key_id))


# Webhooks


def create_webhook(url: str, events: Sequence[str], description: Optional[str]) -> Request:
    body = drop_none({"url": url, "events": list(events), "description": description})
    return Request("POST", "/v1/webhooks", json=body)


def list_webhooks() -> Request:
    return Request("GET", "/v1/webhooks")


def get_webhook(webhook_id: str) -> Request:
    return Request("GET", path("webhooks", webhook_id))


def delete_webhook(webhook_id: str) -> Request:
    return Request("DELETE", path("webhooks", webhook_id))


def webhook_test(webhook_id: str) -> Request:
    """Answers after the test delivery's first attempt (a slow endpoint: up to its timeout)."""
    return Request("POST", path("webhooks", webhook_id, "test"), unbounded=True)


def webhook_deliveries(webhook_id: str, limit: Optional[int]) -> Request:
    params = [("limit", str(limit))] if limit is not None else []
    return Request("GET", path("webhooks", webhook_id, "deliveries"), params=params)


# Web sessions and pairing


def pair(tenant: Optional[str], ttl_s: Optional[int]) -> Request:
    return Request("POST", "/v1/web/pairings", json=drop_none({"tenant": tenant, "ttl_s": ttl_s}))


def list_web_sessions() -> Request:
    return Request("GET", "/v1/web/sessions")


def revoke_web_session(session_id: str) -> Request:
    return Request("DELETE", path("web", "sessions", session_id))
