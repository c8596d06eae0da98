"""Error answers become the exceptions of their codes."""

import pytest

from berth import (
    AuthenticationError,
    Berth,
    BerthError,
    BoxFailed,
    Conflict,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    Timeout,
)
from berth.errors import error_from

from conftest import unique


def test_a_missing_box_is_not_found(client):
    with pytest.raises(NotFound) as caught:
        client.boxes.get(unique("nobody"))
    assert caught.value.status == 404 and caught.value.code == "not_found"


def test_a_taken_name_is_a_conflict(client, make_box):
    box = make_box()
    with pytest.raises(Conflict) as caught:
        client.boxes.create(box.name)
    assert caught.value.code == "already_exists"


def test_a_bad_name_is_an_invalid_request(client):
    with pytest.raises(InvalidRequest):
        client.boxes.create("Not A DNS Label")


def test_a_wrong_key_is_an_authentication_error(client):
    with Berth(url=client.url, api_key="berth_0000") as stranger:
        with pytest.raises(AuthenticationError):
            stranger.boxes.list()


def test_a_tenant_over_its_quota_gets_quota_exceeded(client, make_tenant):
    full = make_tenant("full", max_boxes=0)
    with Berth(url=client.url, api_key=full.api_key) as tenant:
        with pytest.raises(QuotaExceeded) as caught:
            tenant.boxes.create(unique("over"))
    assert caught.value.details["limit"] == "max_boxes"


def test_a_start_that_fails_is_box_failed_with_the_reason(make_box):
    # A credential rule whose secret the tenant does not have: the start fails at `egress`.
    box = make_box(
        egress={
            "allow": ["api.example.com"],
            "credentials": [
                {
                    "name": "absent",
                    "hosts": ["api.example.com"],
                    "header": "x-api-key",
                    "placeholder_env": "EXAMPLE_KEY",
                }
            ],
        }
    )
    with pytest.raises(BoxFailed) as caught:
        box.start()
    assert caught.value.reason and "absent" in caught.value.reason
    assert caught.value.failure["step"] == "egress"
    assert box.refresh().state == "failed"


def test_codes_without_a_live_case_map_too():
    # A 504 needs an agent that hangs; the mapping itself is checked here.
    body = b'{"error":{"code":"timeout","message":"the box\'s agent timed out"}}'
    assert isinstance(error_from(504, body), Timeout)
    unknown = error_from(418, b'{"error":{"code":"from_the_future","message":"m"}}')
    assert type(unknown) is BerthError and unknown.code == "from_the_future"
    assert error_from(502, b"<html>bad gateway</html>").message == "<html>bad gateway</html>"
