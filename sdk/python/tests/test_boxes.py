"""Boxes: create, get, list, update, the lifecycle verbs, delete."""

import pytest

from berth import Conflict, NotFound

from conftest import unique


def test_create_get_list_update_delete(client, make_box):
    team = unique("team")
    box = make_box(
        "crud",
        template="host",
        runtime="sandbox",
        limits={"memory_mib": 256, "pids": 128},
        labels={"team": team},
        env={"GREETING": "hello"},
    )
    assert box.state == "stopped" and box.id.startswith("bx_")
    assert box.info.limits.memory_mib == 256 and box.info.limits.pids == 128
    assert box.info.labels == {"team": team} and box.info.env == {"GREETING": "hello"}

    assert client.boxes.get(box.name).id == box.id
    assert client.boxes.get(box.id).name == box.name
    assert [b.id for b in client.boxes.list(labels={"team": team})] == [box.id]
    assert [b.id for b in client.boxes.list(labels={"team": team}, state="running")] == []

    box.update(labels={"team": team, "tier": "gold"}, stop_after_s=600)
    assert box.info.labels["tier"] == "gold" and box.info.stop_after_s == 600
    assert client.boxes.get(box.name).info.labels["tier"] == "gold"

    client.boxes.delete(box.name)
    with pytest.raises(NotFound):
        client.boxes.get(box.id)


def test_start_pause_resume_stop(make_box):
    box = make_box("life")
    assert box.start().state == "running"
    assert box.exec("echo $GREETING", env={"GREETING": "up"}).stdout == "up\n"
    assert box.pause().state == "paused"
    assert box.resume().state == "running"
    assert box.stop().state == "stopped"
    assert box.refresh().state == "stopped"


def test_a_snapshot_is_refused_where_the_runtime_cannot(client, make_box):
    box = make_box("snap").start()
    runtime = next(r for r in client.runtimes() if r.name == box.info.runtime)
    if runtime.capabilities.get("snapshot"):
        assert box.snapshot().state == "snapshotted"
    else:
        with pytest.raises(Conflict, match="does not support snapshots"):
            box.snapshot()
        assert box.refresh().state == "running"


def test_the_egress_audit_records_a_refused_connection(make_box):
    box = make_box("egress")
    assert box.egress_audit().records == []
    refused = box.exec("curl -sS -m 10 https://example.com -o /dev/null")
    assert refused.exit_code != 0
    page = box.egress_audit(limit=10)
    assert page.next == len(page.records) >= 1, page
    record = page.records[-1]
    assert (record.target, record.port, record.decision) == ("example.com", 443, "deny")
    assert record.reason == "not_allowed" and record.raw["box"] == box.id
    assert box.egress_audit(after=page.next).records == []
