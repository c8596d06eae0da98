"""Fixtures of the SDK's suite: a client of the daemon named by `BERTH_URL` and
`BERTH_API_KEY` (crates/cli/tests/sdk_python.rs starts one), and boxes made for one test
and deleted after it, whether it passed or not; tenants made for one test (never deleted:
the API has no such call) with their keys revoked after it."""

import os
import time
import uuid
from typing import Callable, Iterator, List

import pytest

from berth import Berth, Box, NotFound, Tenant


def unique(prefix: str) -> str:
    """A box name no other test uses (names are unique per tenant)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(check: Callable[[], bool], what: str, within: float = 30.0) -> None:
    """Polls `check` until it holds; fails naming `what` past `within` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {within}s")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def client() -> Iterator[Berth]:
    if not os.environ.get("BERTH_URL"):
        pytest.fail("BERTH_URL and BERTH_API_KEY name the daemon under test")
    with Berth() as client:
        yield client


@pytest.fixture
def make_box(client: Berth) -> Iterator[Callable[..., Box]]:
    """`make_box(prefix, **fields)` makes a box; every one is deleted after the test."""
    made: List[Box] = []

    def make(prefix: str = "sdk", **fields) -> Box:
        box = client.boxes.create(unique(prefix), **fields)
        made.append(box)
        return box

    yield make
    for box in made:
        try:
            box.delete()
        except NotFound:
            pass


@pytest.fixture
def box(make_box: Callable[..., Box]) -> Box:
    """A running box of the `host` template."""
    return make_box().start()


@pytest.fixture
def make_tenant(client: Berth) -> Iterator[Callable[..., Tenant]]:
    """`make_tenant(prefix, **quota)` makes a tenant; after the test, every key of each one
    is revoked, so none is left able to call."""
    made: List[Tenant] = []

    def make(prefix: str = "sdk-tn", **quota) -> Tenant:
        tenant = client.tenants.create(unique(prefix), **quota)
        made.append(tenant)
        return tenant

    yield make
    for tenant in made:
        for key in tenant.keys.list():
            tenant.keys.revoke(key.id)
