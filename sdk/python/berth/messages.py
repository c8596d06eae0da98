"""Talking to a box's agent (blocking client): a message's turn, read from the box's
event log until its `result`, and the log itself, resumed across cut connections."""

from __future__ import annotations

from typing import Iterator, Optional, Protocol

import httpx

from . import _api
from ._sync import Transport
from ._views import TurnView
from .models import Event


class Box(Protocol):
    """What a turn reads of its box (`client.Box`): its id, its transport, its events."""

    id: str
    _t: Transport

    def events(self, *, after: int = 0) -> Iterator[Event]: ...


class Turn(TurnView):
    """The answer to one message: iterate it for the turn's events as they come, the last
    one its `result` (also kept in `result`). `message_id` is the message's id (the key
    given, else `msg_…`); `seq` its place in the box's queue; `events_after` the box's
    newest event seq when it was stored (its turn's events come after it)."""

    def __init__(self, box: "Box", message_id: str, seq: int, after: int) -> None:
        self._box = box
        self.message_id = message_id
        self.seq = seq
        self.events_after = after
        self._after = after
        self.result: Optional[Event] = None

    def __iter__(self) -> Iterator[Event]:
        if self.result is not None:
            return  # read to its end already
        turn = _api.TurnFilter(self.message_id)
        for event in self._box.events(after=self._after):
            self._after = event.seq
            turn.take(event)
            yield event
            if turn.done:
                self.result = event
                return

    def wait(self) -> Event:
        """Reads the turn to its end; answers its `result`."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


def follow(box: "Box", after: int) -> Iterator[Event]:
    """The box's events after seq `after`, live, reconnecting from the last one seen when
    the stream is cut (a restarting daemon), for as long as the caller reads."""
    reconnects = _api.Reconnects("the event stream")
    while True:
        try:
            with box._t.stream(_api.event_stream(box.id, after)) as response:
                parser = _api.SseParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        after = event.seq
                        reconnects.progress()
                        yield event
        except (httpx.ReadError, httpx.RemoteProtocolError):
            pass
        reconnects.cut()
