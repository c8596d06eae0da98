"""What the E2B layer adds: the same work on the same box through the unmodified E2B SDK
(envd under /e2b) and through berth's own API (httpx), in alternating rounds. Run by
benches/benches/e2b.rs with E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, BERTH_URL and
BERTH_KEY set; ROUNDS and SAMPLES say how much. Prints one line per figure:
`<figure> <e2b|berth> <median seconds>`.
"""

import os
import statistics
import sys
import time

import httpx
from e2b import Sandbox

ROUNDS = int(os.environ.get("ROUNDS", "5"))
SAMPLES = int(os.environ.get("SAMPLES", "20"))
MIB = os.urandom(1 << 20)
PATH = "/home/user/bench.bin"

sbx = Sandbox.create(timeout=600)
berth = httpx.Client(
    base_url=os.environ["BERTH_URL"],
    headers={"authorization": f"Bearer {os.environ['BERTH_KEY']}"},
    timeout=60,
)
box = f"/v1/boxes/{sbx.sandbox_id}"


def e2b_run():
    assert sbx.commands.run("true").exit_code == 0


def berth_run():
    # The command the SDK sends for commands.run("true").
    r = berth.post(f"{box}/exec", json={"cmd": ["/bin/bash", "-l", "-c", "true"]})
    assert r.status_code == 200 and r.json()["exit_code"] == 0, r.text


def e2b_write():
    sbx.files.write(PATH, MIB)


def berth_write():
    r = berth.put(f"{box}/files", params={"path": PATH}, content=MIB)
    assert r.status_code in (200, 204), r.text


def e2b_read():
    assert len(sbx.files.read(PATH, format="bytes")) == len(MIB)


def berth_read():
    r = berth.get(f"{box}/files", params={"path": PATH})
    assert r.status_code == 200 and len(r.content) == len(MIB), r.status_code


FIGURES = [
    ("commands.run(true)", e2b_run, berth_run),
    ("files.write(1MiB)", e2b_write, berth_write),
    ("files.read(1MiB)", e2b_read, berth_read),
]

samples = {(name, side): [] for name, _, _ in FIGURES for side in ("e2b", "berth")}
for name, e2b, own in FIGURES:
    # Warm both paths (connections, the box's page cache) before anything counts.
    for _ in range(3):
        e2b()
        own()
for _ in range(ROUNDS):
    for name, e2b, own in FIGURES:
        for side, call in (("e2b", e2b), ("berth", own)):
            for _ in range(SAMPLES):
                started = time.perf_counter()
                call()
                samples[(name, side)].append(time.perf_counter() - started)
for (name, side), values in samples.items():
    print(f"{name} {side} {statistics.median(values):.6f}", flush=True)
sbx.kill()
# The pinned SDK's native HTTP client (pyqwest) can abort in the interpreter's teardown
# after streaming calls; everything is printed by now.
sys.stdout.flush()
os._exit(0)
