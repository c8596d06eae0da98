"""A terminal round trip: keys in, screen out, a resize, a reattach, the exit."""


def read_until(terminal, needle):
    seen = b""
    for chunk in terminal.read():
        seen += chunk
        if needle in seen:
            return seen
    raise AssertionError(f"the terminal ended before {needle!r}: {seen!r}")


def test_a_terminal_round_trip(box):
    terminal = box.terminal(100, 30, cmd=["sh"])
    assert terminal.id.startswith("tm_")
    terminal.write("stty size; echo ma''rk-$((6*7))\n")
    assert b"30 100" in read_until(terminal, b"mark-42")
    terminal.resize(120, 40)
    terminal.write("stty size; echo ma''rk-two\n")
    assert b"40 120" in read_until(terminal, b"mark-two")

    # Left and taken up again: what came meanwhile is not lost.
    terminal.write("echo while-a''way\n")
    terminal.close()
    again = box.terminal(attach=terminal)
    read_until(again, b"while-away")
    again.write("exit 3\n")
    for _ in again.read():
        pass
    assert again.exit_code == 3
