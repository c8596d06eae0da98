"""Where `send` follows its turn from, against a stand-in daemon (httpx's MockTransport):
the post's `events_after`, else (a daemon older than that field) the log's start."""

import asyncio
import json
from typing import List, Optional

import httpx

from berth import Berth, Box, BoxInfo
from berth.aio import AsyncBerth, AsyncBox

BOX = {
    "id": "bx_stand_in", "name": "stand-in", "template": "echo", "state": "running",
    "runtime": "sandbox", "limits": {"memory_mib": 512, "pids": 256, "cpus": 1.0},
    "pause_after_s": 0, "snapshot_after_s": 0, "stop_after_s": 300, "auto_resume": True,
    "disk_mib": 1024, "created_at": "2026-12-04T00:00:00Z",
}
LOG = [
    (1, "result", {"message_id": "earlier", "result": "old"}),
    (2, "assistant", {}),
    (3, "result", {"message_id": "m1", "result": "echo: hi"}),
]


def stand_in(events_after: Optional[int], asked: List[str]) -> httpx.MockTransport:
    """Answers a message's post (with `events_after` when given) and the event stream."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted = {"id": "m1", "seq": 1}
            if events_after is not None:
                posted["events_after"] = events_after
            return httpx.Response(202, json=posted)
        after = int(request.url.params["after"])
        asked.append(request.url.params["after"])
        sse = "".join(
            f"id: {seq}\nevent: {kind}\ndata: {json.dumps(dict(seq=seq, type=kind, data=d))}\n\n"
            for seq, kind, d in LOG if seq > after
        )
        return httpx.Response(200, text=sse, headers={"Content-Type": "text/event-stream"})

    return httpx.MockTransport(handle)


def test_a_turn_is_followed_from_events_after():
    asked: List[str] = []
    http = httpx.Client(base_url="http://berth.test", transport=stand_in(1, asked))
    with Berth("http://berth.test", "berth_x", http=http) as client:
        turn = Box(client._transport, BoxInfo.from_json(BOX)).send("hi")
        assert turn.events_after == 1
        assert [e.seq for e in turn] == [2, 3] and turn.text == "echo: hi"
    assert asked == ["1"]


def test_an_older_daemon_has_the_turn_read_from_the_start():
    asked: List[str] = []
    http = httpx.Client(base_url="http://berth.test", transport=stand_in(None, asked))
    with Berth("http://berth.test", "berth_x", http=http) as client:
        turn = Box(client._transport, BoxInfo.from_json(BOX)).send("hi")
        assert turn.events_after == 0 and turn.wait().seq == 3
    assert asked == ["0"]


def test_the_async_client_follows_from_events_after_too():
    asked: List[str] = []

    async def main() -> None:
        http = httpx.AsyncClient(base_url="http://berth.test", transport=stand_in(2, asked))
        async with AsyncBerth("http://berth.test", "berth_x", http=http) as client:
            turn = await AsyncBox(client._transport, BoxInfo.from_json(BOX)).send("hi")
            assert [e.seq async for e in turn] == [3] and turn.text == "echo: hi"

    asyncio.run(main())
    assert asked == ["2"]
