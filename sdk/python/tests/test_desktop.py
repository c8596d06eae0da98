"""The desktop calls (computer use) on a box of the `host` template, which has no desktop:
each one is `Conflict` saying so and what to use instead, and none wakes the box. (A real
desktop takes minutes to build; berth's own end-to-end tests drive one.) The request shapes
and the error type are those of a desktop box's calls; the VNC WebSocket's refusal comes
before its upgrade, as the API's error."""

import asyncio

import pytest

from berth import Conflict, InvalidRequest
from berth.aio import AsyncBerth

from conftest import unique


def no_desktop(error: Conflict, name: str, service: str = "xvfb") -> None:
    assert error.code == "conflict" and error.status == 409
    assert error.message == (
        f"box {name} has no desktop (template host has no {service} service); "
        "use --template desktop"
    ), error.message


def test_a_box_without_a_desktop_refuses_every_call_and_stays_asleep(make_box):
    box = make_box("desk")
    calls = [
        box.desktop.status,
        box.desktop.screenshot,
        lambda: box.desktop.screenshot(cursor=True),
        lambda: box.desktop.actions([{"type": "click", "x": 10, "y": 20}]),
        box.desktop.cursor,
    ]
    for call in calls:
        with pytest.raises(Conflict) as caught:
            call()
        no_desktop(caught.value, box.name)
    # A refused action is the caller's, with the action's index, before the box is asked.
    with pytest.raises(InvalidRequest) as caught:
        box.desktop.actions([{"type": "wait", "ms": 1}, {"type": "key", "keys": "ctrl+;"}])
    assert caught.value.details == {"index": 1, "type": "key"}
    # The screen over VNC needs the desktop's VNC server.
    with pytest.raises(Conflict) as caught:
        box.desktop.vnc()
    no_desktop(caught.value, box.name, "vnc")
    assert box.refresh().state == "stopped", "nothing woke the box"


def test_the_async_desktop_calls_are_refused_alike():
    async def main() -> None:
        async with AsyncBerth() as client:
            box = await client.boxes.create(unique("adesk"))
            try:
                for call in [
                    box.desktop.status(),
                    box.desktop.screenshot(),
                    box.desktop.actions([{"type": "move", "x": 1, "y": 1}]),
                    box.desktop.cursor(),
                ]:
                    with pytest.raises(Conflict) as caught:
                        await call
                    no_desktop(caught.value, box.name)
                with pytest.raises(Conflict) as caught:
                    await box.desktop.vnc()
                no_desktop(caught.value, box.name, "vnc")
                assert (await box.refresh()).state == "stopped"
            finally:
                await box.delete()

    asyncio.run(main())
