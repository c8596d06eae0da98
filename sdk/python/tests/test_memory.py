"""A box's `/memory` read without waking it: through its agent while it runs (`source`
`box`), from its volume image once it is stopped (`volume`), where it stays stopped; the
refusals map to the SDK's errors."""

import pytest

from berth import InvalidRequest, MemoryEntry, NotFound

WRITE_MEMORY = (
    "mkdir -p /memory/entities /memory/timeline/2026 && "
    "printf 'Alice likes tea.\\n' > /memory/entities/alice.md && "
    "printf 'odd' > '/memory/entities/a b#1?%.md' && "
    "printf 'x' > /memory/timeline/2026/12-04.md && "
    "ln -s /home/user/.bashrc /memory/escape"
)
ALICE = b"Alice likes tea.\n"


def paths(entries):
    return [e.path for e in entries]


def entry(entries, path) -> MemoryEntry:
    [found] = [e for e in entries if e.path == path]
    return found


def test_memory_is_read_from_the_running_box_then_from_the_stopped_boxs_volume(client, box):
    assert box.exec(WRITE_MEMORY).exit_code == 0

    awake = box.memory.tree()
    assert awake.source == "box" and not awake.truncated
    listed = paths(awake.entries)
    for want in ["entities", "entities/alice.md", "escape", "timeline/2026/12-04.md"]:
        assert want in listed, listed
    alice = entry(awake.entries, "entities/alice.md")
    assert (alice.kind, alice.size) == ("file", len(ALICE))
    assert alice.modified is not None and alice.modified > 1_700_000_000
    assert alice.raw["path"] == "entities/alice.md"
    assert entry(awake.entries, "entities").kind == "dir"
    assert box.memory.read("entities/alice.md") == ALICE
    assert box.memory.read_text("/memory/entities/alice.md") == ALICE.decode()
    assert box.memory.read("entities/a b#1?%.md") == b"odd"

    box.stop()
    asleep = box.memory.tree()
    assert asleep.source == "volume"
    assert paths(asleep.entries) == listed
    alice = entry(asleep.entries, "entities/alice.md")
    assert (alice.kind, alice.size, alice.modified) == ("file", len(ALICE), None)
    escape = entry(asleep.entries, "escape")
    assert (escape.kind, escape.target) == ("symlink", "/home/user/.bashrc")
    # timeline/README.md is the seeded layout's.
    assert paths(box.memory.tree("timeline").entries) == [
        "timeline/2026", "timeline/2026/12-04.md", "timeline/README.md"
    ]
    assert box.memory.read("entities/alice.md") == ALICE
    assert box.memory.read_text("timeline/2026/12-04.md") == "x"
    assert box.memory.read("entities/a b#1?%.md") == b"odd"
    with pytest.raises(NotFound):
        box.memory.read("entities/bob.md")
    with pytest.raises(NotFound):
        box.memory.tree("nowhere")
    assert client.boxes.get(box.id).state == "stopped"
    assert box.refresh().state == "stopped"


@pytest.mark.parametrize("running", [True, False], ids=["box", "volume"])
def test_memory_refusals_map_to_errors(box, running):
    assert box.exec(WRITE_MEMORY).exit_code == 0
    if not running:
        box.stop()
    refusals = [
        ("entities", "is_a_directory"),
        ("entities/alice.md/more", "not_a_directory"),
        ("escape", "not_a_regular_file"),
        ("../home/user/.bashrc", "invalid_request"),
        ("entities/./alice.md", "invalid_request"),
    ]
    for path, code in refusals:
        with pytest.raises(InvalidRequest) as caught:
            box.memory.read(path)
        assert (caught.value.code, caught.value.status) == (code, 400), path
    with pytest.raises(InvalidRequest) as caught:
        box.memory.tree("entities/alice.md")
    assert caught.value.code == "not_a_directory"
    with pytest.raises(InvalidRequest):
        box.memory.tree("..")
    assert box.refresh().state == ("running" if running else "stopped")
