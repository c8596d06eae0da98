"""E2B's desktop SDK (`e2b-desktop`, from PyPI), unmodified, against a berth `desktop` box:
its own quickstart (create, screenshot, write, press, left_click) and its stream URL. Run by
crates/cli/tests/e2b_sdk.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and E2B_DOMAIN
pointing at a `berth up` that has built the desktop image.

Prints `ok <check>` for each check that passed, and `box <sandbox id>` for the sandbox;
any failure raises (exit status 1).
"""

import io
import os
import time

from e2b import CommandExitException
from e2b_desktop import Sandbox
from PIL import Image

# Long enough for a loaded machine; each wait polls, and fails only past it.
WAIT_S = 120


def ok(check):
    print(f"ok {check}", flush=True)


def wait_for(what, condition):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            shot = os.path.join(os.environ.get("SHOTS_DIR", "."), "e2b-desktop-timeout.png")
            with open(shot, "wb") as f:
                f.write(desktop.screenshot())
            raise TimeoutError(f"waiting for {what} (the screen then: {shot})")
        time.sleep(0.25)


def windows(application):
    """The application's visible windows; the SDK raises while there are none (its
    `xdotool search` exits 1)."""
    try:
        return desktop.get_application_windows(application)
    except CommandExitException:
        return []


desktop = Sandbox.create(timeout=600)
print(f"box {desktop.sandbox_id}", flush=True)
try:
    ok("create")

    # The SDK started an X server and an XFCE session of its own: both joined the box's.
    for program in ["Xvfb", "xfce4-session"]:
        count = desktop.commands.run(f"pgrep -c -x {program}").stdout.strip()
        assert count == "1", f"{count} {program} processes"
    ok("one desktop")

    image = Image.open(io.BytesIO(desktop.screenshot()))
    assert image.format == "PNG", image.format
    assert image.size == desktop.get_screen_size() == (1024, 768), (
        image.size,
        desktop.get_screen_size(),
    )
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 16, "a screen of one colour"
    ok("screenshot")

    # A terminal by XFCE's shortcut, then a command written into it.
    desktop.press(["ctrl", "alt", "t"])
    wait_for(
        "a terminal window",
        lambda: windows("xfce4-terminal"),
    )
    desktop.write("echo written by e2b-desktop > /home/user/e2b.txt")
    desktop.press("enter")
    wait_for(
        "the file the command wrote",
        lambda: desktop.files.exists("/home/user/e2b.txt")
        and desktop.files.read("/home/user/e2b.txt") == "written by e2b-desktop\n",
    )
    ok("write and press")

    desktop.left_click(400, 300)
    assert desktop.get_cursor_position() == (400, 300), desktop.get_cursor_position()
    desktop.move_mouse(10, 20)
    assert desktop.get_cursor_position() == (10, 20)
    ok("left_click")

    desktop.stream.start()
    url = desktop.stream.get_url()
    assert url.startswith(f"https://{desktop.get_host(6080)}/vnc.html"), url
    desktop.stream.stop()
    ok("stream url")
finally:
    desktop.kill()
print("ok done", flush=True)
