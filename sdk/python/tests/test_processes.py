"""Background processes: they outlive their readers, and their output resumes where a
reader left off; stdin, signals and the exit."""

from berth import Berth

from conftest import wait_until


def read_until(process, *needles):
    """Reads the process's output until every one of `needles` shows, then leaves the
    stream."""
    text = ""
    for chunk in process.output():
        text += chunk.text
        if all(needle in text for needle in needles):
            return text
    raise AssertionError(f"the process ended before {needles!r}: {text!r}")


def test_a_process_outlives_its_reader_and_its_output_resumes(client, box):
    process = box.spawn(
        "echo one; echo two >&2; echo three; "
        "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo four; exit 5"
    )
    assert process.id.startswith("pr_") and process.exit is None

    # stdout and stderr are two pipes: their lines may come in either order.
    assert sorted(read_until(process, "two\n", "three\n").splitlines()) == ["one", "three", "two"]
    # The reader left; another client sees the process still running.
    with Berth() as other:
        listed = {p.id: p for p in other.boxes.get(box.name).processes()}
        assert listed[process.id].exit is None

    box.exec("touch /tmp/go")
    rest = [(chunk.stream, chunk.text) for chunk in process.output()]
    assert rest == [("stdout", "four\n")]
    assert process.exit.code == 5 and process.exit.output_end == process.offset

    # From the start, stdout and stderr in the order they came.
    whole = [(c.stream, c.text) for c in process.output(offset=0)]
    assert sorted("".join(t for _, t in whole).splitlines()) == ["four", "one", "three", "two"]
    assert ("stderr", "two\n") in whole
    assert process.wait().status == 5


def test_stdin_is_written_and_closed(box):
    process = box.spawn(["cat"], open_stdin=True)
    process.write_stdin("hello ")
    process.write_stdin(b"world", close=True)
    assert process.wait().code == 0
    assert "".join(c.text for c in process.output(offset=0)) == "hello world"


def test_a_killed_process_ends_with_its_signal(box):
    process = box.spawn("sleep 300", keep_awake=False)
    wait_until(lambda: any(p.id == process.id for p in box.processes()), "the process is listed")
    process.kill()
    ended = process.wait()
    assert ended.signal == 9 and ended.code is None and ended.status == 137


def test_a_terminated_process_sees_term(box):
    process = box.spawn("trap 'echo got term; exit 0' TERM; echo ready; while :; do sleep 0.05; done")
    read_until(process, "ready")
    process.signal("SIGTERM")
    assert process.wait().code == 0
    assert "got term" in "".join(c.text for c in process.output(offset=0))
