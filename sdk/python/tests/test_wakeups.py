"""A box's wakeups (the `echo` template's harness answers them): one fires and its
message's turn runs; others are listed soonest first and cancelled."""

from datetime import datetime, timedelta, timezone

import pytest

from berth import InvalidRequest, NotFound


def test_a_wakeup_fires_and_its_turn_runs(make_box):
    box = make_box("wake", template="echo")
    wakeup = box.wakeups.create("good morning", in_s=1)
    assert wakeup.id.startswith("wk_") and wakeup.kind == "in" and wakeup.created_by == "api"

    fired = None
    for event in box.events():
        if event.type == "wakeup" and event.data.get("wakeup_id") == wakeup.id:
            fired = event
        if fired and event.type == "result" and event.message_id == fired.message_id:
            assert event.data["result"] == "echo: good morning"
            break
    assert box.wakeups.list() == []  # a one-shot wakeup ends when it fires
    assert [m.content for m in box.messages()] == ["good morning"]


def test_wakeups_are_listed_soonest_first_and_cancelled(make_box):
    box = make_box("wake", template="echo")
    later = box.wakeups.create("weekly", cron="0 9 * * 1", tz="Europe/Paris")
    sooner = box.wakeups.create("in an hour", at=datetime.now(timezone.utc) + timedelta(hours=1))
    assert later.kind == "cron" and (later.cron, later.tz) == ("0 9 * * 1", "Europe/Paris")
    assert sooner.kind == "at" and sooner.cron is None
    listed = box.wakeups.list()
    assert {w.id for w in listed} == {later.id, sooner.id}
    due = [datetime.fromisoformat(w.next_due_at.replace("Z", "+00:00")) for w in listed]
    assert due == sorted(due)
    assert box.wakeups.delete(later.id).id == later.id
    assert [w.id for w in box.wakeups.list()] == [sooner.id]
    with pytest.raises(NotFound):
        box.wakeups.delete(later.id)
    with pytest.raises(InvalidRequest):
        box.wakeups.create("two schedules", in_s=60, cron="0 9 * * 1")
    assert box.refresh().state == "stopped"  # none of it woke the box
