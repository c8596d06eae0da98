"""The daemon itself: health, runtimes, templates; and the tenant's secrets."""

import pytest

from berth import InvalidRequest, NotFound

from conftest import unique


def test_health_runtimes_and_templates(client):
    health = client.health()
    assert health.status == "ok" and health.version

    runtimes = {r.name: r for r in client.runtimes()}
    assert runtimes["sandbox"].available and runtimes["sandbox"].reason is None
    assert [r.name for r in runtimes.values() if r.default] == ["sandbox"]
    assert set(runtimes["sandbox"].capabilities) >= {"pause", "snapshot"}

    templates = {t.name: t for t in client.templates.list()}
    assert templates["echo"].harness is not None and templates["host"].harness is None
    assert "sandbox" in templates["echo"].runtimes and templates["echo"].origin == "builtin"
    reloaded = client.templates.reload()
    assert {t.name for t in reloaded.templates} == set(templates) and reloaded.errors == []


def test_a_secret_is_set_replaced_listed_and_deleted(client):
    name = unique("sdk-secret")
    try:
        made = client.secrets.set(name, "sk-first value")
        assert made.name == name and made.created is True
        replaced = client.secrets.set(name, "sk-second")
        assert replaced.created is False and replaced.created_at == made.created_at
        listed = [s for s in client.secrets.list() if s.name == name]
        assert len(listed) == 1 and listed[0].created is None
        with pytest.raises(InvalidRequest):
            client.secrets.set(name, " leading space")
    finally:
        client.secrets.delete(name)
    assert name not in [s.name for s in client.secrets.list()]
    with pytest.raises(NotFound):
        client.secrets.delete(name)
