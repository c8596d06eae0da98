"""Exec: collected, and streamed to callbacks as the output comes."""

import pytest

from berth import NotFound


def test_a_collected_exec_has_its_code_and_output(box):
    result = box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.timed_out


def test_exec_takes_cwd_env_user_and_stdin(box):
    assert box.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert box.exec("echo $A-$B", env={"A": "1", "B": "2"}).stdout == "1-2\n"
    assert box.exec("id -u", user="root").stdout == "0\n"
    assert box.exec("id -u").stdout == "1001\n"
    assert box.exec("cat", stdin="fed in").stdout == "fed in"
    assert box.exec("cat", stdin=b"bytes in").stdout == "bytes in"


def test_a_command_past_its_timeout_is_killed(box):
    result = box.exec("sleep 30", timeout=1)
    assert result.timed_out and result.exit_code != 0


def test_a_missing_program_is_not_found(box):
    with pytest.raises(NotFound):
        box.exec(["/no/such/program"])


def test_a_streamed_exec_hands_output_over_while_the_command_runs(box):
    # The command waits for a file that only the stdout callback makes: the exec could not
    # end if the first line were not handed over before the command's end.
    seen = []

    def on_stdout(text):
        seen.append(("out", text))
        if text.startswith("first"):
            box.exec("touch /tmp/go")

    result = box.exec(
        "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo second >&2; exit 7",
        on_stdout=on_stdout,
        on_stderr=lambda text: seen.append(("err", text)),
        timeout=30,
    )
    assert seen == [("out", "first\n"), ("err", "second\n")]
    assert (result.exit_code, result.stdout, result.stderr) == (7, "first\n", "second\n")
    assert not result.timed_out


def test_a_streamed_exec_of_a_missing_program_raises(box):
    with pytest.raises(NotFound):
        box.exec(["/no/such/program"], on_stdout=print)
