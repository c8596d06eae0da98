"""The E2B Python SDK, unmodified, against berth: `sandbox.commands` with the sync
`Sandbox` and the async `AsyncSandbox`. Run by crates/cli/tests/e2b_sdk.rs with
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at a `berth up`.

Prints `ok <check>` for each check that passed, and `box <sandbox id>` for each sandbox;
any failure raises (exit status 1).
"""

import asyncio
import os
import sys
import time

from e2b import AsyncSandbox, CommandExitException, Sandbox

# The E2B template the sandboxes are made from: `base` (berth's default template) unless
# the test names another (the qemu run names `debian`, which has bash).
TEMPLATE = os.environ.get("BERTH_E2B_TEMPLATE", "base")

# Long enough for a loaded machine; each wait polls, and fails only past it.
WAIT_S = 90
SANDBOX_ENVS = {"GREETING": "hello"}


def ok(check):
    print(f"ok {check}", flush=True)


def listed(processes, pid):
    found = [p for p in processes if p.pid == pid]
    assert len(found) == 1, (pid, processes)
    return found[0]


def sync_suite():
    sbx = Sandbox.create(template=TEMPLATE, timeout=300, envs=SANDBOX_ENVS)
    print(f"box {sbx.sandbox_id}", flush=True)
    try:
        result = sbx.commands.run("echo out; echo err >&2")
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 0), result
        ok("sync run")

        try:
            sbx.commands.run("echo partial; echo bad >&2; exit 3")
            raise AssertionError("a non-zero exit did not raise")
        except CommandExitException as e:
            assert (e.exit_code, e.stdout, e.stderr) == (3, "partial\n", "bad\n"), e
            assert e.error == "exit status 3", e.error
        ok("sync non-zero exit raises")

        chunks = []
        result = sbx.commands.run(
            "for i in 1 2 3; do echo line$i; done", on_stdout=chunks.append
        )
        assert "".join(chunks) == "line1\nline2\nline3\n" == result.stdout, chunks
        ok("sync on_stdout")

        result = sbx.commands.run("echo $OWN $GREETING", envs={"OWN": "mine"})
        assert result.stdout == "mine hello\n", result
        ok("sync envs")

        assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
        ok("sync cwd")

        assert sbx.commands.run("whoami").stdout == "user\n"
        assert sbx.commands.run("whoami", user="root").stdout == "root\n"
        ok("sync user")

        handle = sbx.commands.run("sleep 1; echo done", background=True)
        assert handle.pid > 0, handle.pid
        assert handle.wait().stdout == "done\n"
        ok("sync background wait")

        handle = sbx.commands.run("read a; echo got:$a; cat", background=True, stdin=True)
        handle.send_stdin("hello\n")
        sbx.commands.send_stdin(handle.pid, b"more\n")
        handle.close_stdin()
        result = handle.wait()
        assert result.stdout == "got:hello\nmore\n", result
        ok("sync stdin")

        # StreamInput: one ordered stream of many chunks, as the iterable yields them.
        lines = [f"line {i}\n" for i in range(200)]
        handle = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.stream_input(handle.pid, iter(lines))
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "".join(lines)
        ok("sync stream_input")

        handle = sbx.commands.run(
            "sleep 600", background=True, envs={"LISTED": "yes"}, cwd="/tmp"
        )
        info = listed(sbx.commands.list(), handle.pid)
        assert (info.cmd, info.args, info.cwd) == ("/bin/bash", ["-l", "-c", "sleep 600"], "/tmp"), info
        assert info.envs.get("LISTED") == "yes", info.envs
        ok("sync list")

        assert handle.kill() is True
        try:
            handle.wait()
            raise AssertionError("a killed command did not raise")
        except CommandExitException as e:
            assert e.exit_code == -1 and e.error == "signal: killed", e
        assert sbx.commands.kill(handle.pid) is False
        assert all(p.pid != handle.pid for p in sbx.commands.list())
        ok("sync kill")

        handle = sbx.commands.run(
            "echo first; read x; echo second:$x", background=True, stdin=True
        )
        handle.disconnect()
        again = sbx.commands.connect(handle.pid)
        assert again.pid == handle.pid
        sbx.commands.send_stdin(handle.pid, "later\n")
        result = again.wait()
        assert result.stdout == "first\nsecond:later\n", result
        ok("sync connect")
    finally:
        sbx.kill()


async def async_suite():
    sbx = await AsyncSandbox.create(template=TEMPLATE, timeout=300, envs=SANDBOX_ENVS)
    print(f"box {sbx.sandbox_id}", flush=True)
    try:
        result = await sbx.commands.run("echo out; echo err >&2")
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 0), result
        ok("async run")

        try:
            await sbx.commands.run("echo partial; exit 7")
            raise AssertionError("a non-zero exit did not raise")
        except CommandExitException as e:
            assert (e.exit_code, e.stdout) == (7, "partial\n"), e
        ok("async non-zero exit raises")

        chunks = []
        await sbx.commands.run("echo a; echo b", on_stdout=chunks.append)
        assert "".join(chunks) == "a\nb\n", chunks
        ok("async on_stdout")

        result = await sbx.commands.run(
            "echo $OWN $GREETING; pwd; whoami", envs={"OWN": "x"}, cwd="/tmp", user="root"
        )
        assert result.stdout == "x hello\n/tmp\nroot\n", result
        ok("async envs cwd user")

        handle = await sbx.commands.run("cat", background=True, stdin=True)
        await handle.send_stdin("piped\n")
        await handle.close_stdin()
        assert (await handle.wait()).stdout == "piped\n"
        ok("async stdin")

        handle = await sbx.commands.run("cat", background=True, stdin=True)
        async with sbx.commands.stream_input(handle.pid) as stream:
            for i in range(100):
                await stream.send(f"chunk {i}\n")
        await handle.close_stdin()
        result = await handle.wait()
        assert result.stdout == "".join(f"chunk {i}\n" for i in range(100)), result
        ok("async stream_input")

        handle = await sbx.commands.run("sleep 600", background=True, envs={"LISTED": "a"})
        info = listed(await sbx.commands.list(), handle.pid)
        assert info.args == ["-l", "-c", "sleep 600"] and info.envs.get("LISTED") == "a", info
        ok("async list")

        assert await handle.kill() is True
        try:
            await handle.wait()
            raise AssertionError("a killed command did not raise")
        except CommandExitException as e:
            assert e.exit_code == -1, e
        assert await sbx.commands.kill(handle.pid) is False
        ok("async kill")

        seen = []
        handle = await sbx.commands.run(
            "echo first; read x; echo second:$x", background=True, stdin=True
        )
        await handle.disconnect()
        again = await sbx.commands.connect(handle.pid, on_stdout=seen.append)
        await sbx.commands.send_stdin(handle.pid, "later\n")
        result = await again.wait()
        assert result.stdout == "first\nsecond:later\n", result
        assert "".join(seen) == result.stdout, seen
        ok("async connect")
    finally:
        await sbx.kill()


def main():
    started = time.monotonic()
    sync_suite()
    asyncio.run(async_suite())
    assert time.monotonic() - started < 10 * WAIT_S
    ok("done")


if __name__ == "__main__":
    main()
    # Every check is done and printed. The pinned SDK's native HTTP client (pyqwest) can
    # abort in the interpreter's teardown after streaming calls ("Fatal Python error:
    # Aborted", no Python frame); leave without it.
    sys.stdout.flush()
    os._exit(0)
