"""The E2B Python SDK, unmodified, against berth: `sandbox.pty` with the sync `Sandbox` and
the async `AsyncSandbox`. Run by crates/cli/tests/e2b_sdk.rs with E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY pointing at a `berth up`.

Prints `ok <check>` for each check that passed, and `box <sandbox id>` for each sandbox;
any failure raises (exit status 1). A terminal echoes its input, so each command prints a
marker the input itself does not contain (`$((1+1))` is echoed as typed, printed as 2).
"""

import asyncio
import os
import sys
import time

from e2b import AsyncSandbox, CommandExitException, PtySize, Sandbox

# The E2B template the sandboxes are made from: `base` (berth's default template) unless
# the test names another (the qemu run names `debian`, which has bash).
TEMPLATE = os.environ.get("BERTH_E2B_TEMPLATE", "base")
# Long enough for a loaded machine; each wait polls, and fails only past it.
WAIT_S = 90


def ok(check):
    print(f"ok {check}", flush=True)


def read_until(handle, needle, seen):
    """Reads a sync handle's PTY output into `seen` until it holds `needle`."""
    if needle in seen:
        return
    for _, _, pty in handle:
        if pty is not None:
            seen += pty
            if needle in seen:
                return
    raise AssertionError(f"the PTY ended before printing {needle!r}: {bytes(seen)!r}")


def sync_suite():
    sbx = Sandbox.create(template=TEMPLATE, timeout=300)
    print(f"box {sbx.sandbox_id}", flush=True)
    try:
        handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=WAIT_S * 2)
        assert handle.pid > 0
        seen = bytearray()
        sbx.pty.send_stdin(handle.pid, b"echo SIZE=$(stty size)=$((1+1))\n")
        read_until(handle, b"SIZE=24 80=2", seen)
        ok("sync pty create and send_stdin")

        shown = [p for p in sbx.commands.list() if p.pid == handle.pid]
        assert len(shown) == 1 and shown[0].args == ["-i", "-l"], shown
        ok("sync pty listed")

        sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(handle.pid, b"echo SIZE=$(stty size)=$((2+2))\n")
        read_until(handle, b"SIZE=30 100=4", seen)
        ok("sync pty resize")

        handle.disconnect()
        again = sbx.pty.connect(handle.pid, timeout=WAIT_S * 2)
        replayed = bytearray()
        sbx.pty.send_stdin(handle.pid, b"echo AGAIN=$((3+3))\n")
        read_until(again, b"AGAIN=6", replayed)
        ok("sync pty connect")

        assert sbx.pty.kill(handle.pid) is True
        try:
            again.wait()
            raise AssertionError("a killed PTY did not raise")
        except CommandExitException as e:
            assert e.exit_code == -1, e
        assert sbx.pty.kill(handle.pid) is False
        ok("sync pty kill")

        handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=WAIT_S * 2)
        sbx.pty.send_stdin(handle.pid, b"exit 5\n")
        try:
            handle.wait()
            raise AssertionError("exit 5 did not raise")
        except CommandExitException as e:
            assert e.exit_code == 5, e
        ok("sync pty exit code")
    finally:
        sbx.kill()


async def wait_for(what, condition):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def async_suite():
    sbx = await AsyncSandbox.create(template=TEMPLATE, timeout=300)
    print(f"box {sbx.sandbox_id}", flush=True)
    try:
        seen = bytearray()
        handle = await sbx.pty.create(
            PtySize(rows=20, cols=60), on_data=seen.extend, timeout=WAIT_S * 2
        )
        await sbx.pty.send_stdin(handle.pid, b"echo SIZE=$(stty size)=$((1+1))\n")
        await wait_for("stty size", lambda: b"SIZE=20 60=2" in seen)
        ok("async pty create and on_data")

        await sbx.pty.resize(handle.pid, PtySize(rows=40, cols=120))
        await sbx.pty.send_stdin(handle.pid, b"echo SIZE=$(stty size)=$((2+2))\n")
        await wait_for("the new size", lambda: b"SIZE=40 120=4" in seen)
        ok("async pty resize")

        await handle.disconnect()
        later = bytearray()
        again = await sbx.pty.connect(handle.pid, on_data=later.extend, timeout=WAIT_S * 2)
        await sbx.pty.send_stdin(handle.pid, b"echo AGAIN=$((3+3))\n")
        await wait_for("output after connect", lambda: b"AGAIN=6" in later)
        ok("async pty connect")

        assert await sbx.pty.kill(handle.pid) is True
        try:
            await again.wait()
            raise AssertionError("a killed PTY did not raise")
        except CommandExitException as e:
            assert e.exit_code == -1, e
        ok("async pty kill")
    finally:
        await sbx.kill()


def main():
    sync_suite()
    asyncio.run(async_suite())
    ok("done")


if __name__ == "__main__":
    main()
    # Every check is done and printed. The pinned SDK's native HTTP client (pyqwest) can
    # abort in the interpreter's teardown after streaming calls ("Fatal Python error:
    # Aborted", no Python frame); leave without it.
    sys.stdout.flush()
    os._exit(0)
