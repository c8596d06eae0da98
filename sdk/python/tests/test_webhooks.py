"""Webhooks: registered, listed, tested and deleted. The endpoint's name does not resolve,
so the test delivery fails, and says why."""

import pytest

from berth import InvalidRequest, NotFound

URL = "https://hooks.example.invalid/in"


def test_a_webhook_is_registered_tested_and_deleted(client):
    hook = client.webhooks.create(URL, events=["turn.completed", "box.failed"],
                                  description="sdk test")
    try:
        assert hook.id.startswith("wh_") and hook.secret.startswith("whsec_")
        assert hook.events == ["turn.completed", "box.failed"]
        assert hook.info.description == "sdk test"
        got = client.webhooks.get(hook.id)
        assert got.url == URL and got.secret is None  # shown only when made
        assert hook.id in [w.id for w in client.webhooks.list()]

        delivery = hook.test()
        assert delivery.event == "webhook.test" and delivery.attempts >= 1
        assert not delivery.delivered and delivery.last_error, delivery
        assert delivery.id in [d.id for d in got.deliveries(limit=5)]
    finally:
        hook.delete()
    with pytest.raises(NotFound):
        client.webhooks.get(hook.id)


def test_a_webhook_needs_https_and_known_events(client):
    with pytest.raises(InvalidRequest):
        client.webhooks.create("http://hooks.example.invalid/in", events=["turn.completed"])
    with pytest.raises(InvalidRequest):
        client.webhooks.create(URL, events=["no.such.event"])
    # Deleting what is not there is an error too.
    with pytest.raises(NotFound):
        client.webhooks.delete("wh_0000000000000000")
