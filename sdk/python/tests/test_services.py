"""A box's services, on the `svc` template (crates/cli/tests/sdk_python.rs puts it in the
daemon's data dir: one service, `hello`, that says hello and sleeps): listed `stopped`
without waking the box, running once it is, its log read and followed, and a restart."""

import pytest

from berth import Conflict, NotFound

from conftest import wait_until


def log_text(box, name, **kwargs):
    return "".join(chunk.text for chunk in box.service_logs(name, **kwargs))


def test_services_are_listed_asleep_and_run_log_and_restart_awake(make_box):
    box = make_box("svc", template="svc")
    listed = box.services()
    assert [(s.name, s.state, s.pid, s.restarts, s.log_end) for s in listed] == [
        ("hello", "stopped", None, 0, 0)
    ]
    assert box.refresh().state == "stopped", "listing does not wake the box"
    # Its log lives in the running box: none to read while it is stopped.
    with pytest.raises(Conflict):
        log_text(box, "hello")
    with pytest.raises(NotFound):
        box.restart_service("nope")
    assert box.refresh().state == "stopped", "an unknown name wakes nothing"

    box.start()
    wait_until(lambda: box.services()[0].state == "running", "the service runs")
    wait_until(lambda: "hello\n" in log_text(box, "hello"), "the service's log says hello")
    before = box.services()[0]
    assert before.pid is not None and before.log_end > 0

    restarted = box.restart_service("hello")
    assert restarted.name == "hello" and restarted.restarts == before.restarts + 1
    # Followed from where the log was before the restart: the new life says hello again.
    text = ""
    for chunk in box.service_logs("hello", offset=before.log_end, follow=True):
        assert chunk.offset >= before.log_end
        text += chunk.text
        if "hello\n" in text:
            break
    wait_until(lambda: box.services()[0].state == "running", "the service runs again")
    assert box.services()[0].pid != before.pid
