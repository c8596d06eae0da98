"""A box's `/memory` read without waking it: through its agent while it runs (`source`
`box`), from its volume image once it is stopped (`volume`), where it stays stopped; the
refusals map to the SDK's errors. Then beyond its files: searched and its `[[links]]`
followed while the box is stopped, and its history (snapshots, a diff, a file as a
snapshot holds it, a restore and its undoing), with both clients."""

import asyncio

import pytest

from berth import InvalidRequest, MemoryEntry, NotFound
from berth.aio import AsyncBerth
from berth.models_memory import MemoryEdge, MemoryLink, MemoryNode

from conftest import unique

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


WRITE_LINKED = (
    "mkdir -p /memory/entities && "
    "printf 'Alice likes [[bob]] and zanzibar.\\n' > /memory/entities/alice.md && "
    "printf 'Bob\\n' > /memory/entities/bob.md"
)
LINKED_ALICE = b"Alice likes [[bob]] and zanzibar.\n"
REWRITE = (
    "printf 'Alice moved to Oslo.\\n' > /memory/entities/alice.md && "
    "printf 'Carol\\n' > /memory/entities/carol.md"
)
MOVED_ALICE = b"Alice moved to Oslo.\n"


def hit_paths(results):
    return [hit.path for hit in results.hits]


def test_a_stopped_boxs_memory_is_searched_and_its_links_followed_without_waking_it(box):
    assert box.exec(WRITE_LINKED).exit_code == 0
    box.stop()

    found = box.memory.search("zanzibar")
    assert found.query == "zanzibar" and found.indexed_files >= 2
    assert hit_paths(found) == ["entities/alice.md"]
    [hit] = found.hits
    assert hit.score > 0 and hit.matched == ["zanzibar"] and "zanzibar" in hit.snippet
    assert hit_paths(box.memory.search("bob alice", limit=1)) in (
        ["entities/alice.md"], ["entities/bob.md"]
    )
    with pytest.raises(InvalidRequest) as caught:
        box.memory.search("   ")
    assert caught.value.status == 400

    alice = box.memory.links("entities/alice.md")
    assert alice.path == "entities/alice.md"
    assert alice.outgoing == [MemoryLink(text="bob", target="entities/bob.md", exists=True)]
    bob = box.memory.links("/memory/entities/bob.md")
    assert bob.outgoing == [] and "entities/alice.md" in bob.backlinks
    with pytest.raises(NotFound):
        box.memory.links("entities/nobody.md")

    graph = box.memory.graph()
    assert MemoryEdge(from_path="entities/alice.md", to="entities/bob.md") in graph.edges
    assert MemoryNode(path="entities/bob.md", exists=True) in graph.nodes
    assert graph.raw["edges"]
    assert box.refresh().state == "stopped"


def test_memory_snapshots_diff_and_restore(box):
    assert box.exec(WRITE_LINKED).exit_code == 0
    first = box.memory.snapshot()
    assert first.id.startswith("ms_") and len(first.id) == 18
    # `stored_bytes` may be 0: the store is shared, and an earlier test wrote these files.
    assert first.reason == "request" and first.files >= 2 and first.bytes > len(LINKED_ALICE)
    box.stop()

    # The history reads from the store: the box stays stopped.
    listed = box.memory.snapshots()
    assert listed[0] == first and {s.reason for s in listed} <= {"request", "stop"}
    tree = box.memory.snapshot_tree(first)
    assert tree.snapshot == first
    entries = {e.path: e for e in tree.entries}
    assert entries["entities"].kind == "dir"
    assert (entries["entities/alice.md"].kind, entries["entities/alice.md"].size) == (
        "file", len(LINKED_ALICE)
    )
    assert box.memory.read_at(first, "entities/alice.md") == LINKED_ALICE
    assert box.memory.read_text_at(first.id, "/memory/entities/bob.md") == "Bob\n"
    with pytest.raises(NotFound):
        box.memory.read_at(first, "entities/carol.md")
    with pytest.raises(NotFound):
        box.memory.snapshot_tree("ms_000000000000001")
    assert box.refresh().state == "stopped"

    assert box.exec(REWRITE).exit_code == 0  # wakes the box
    second = box.memory.snapshot()
    assert second.id > first.id and second.root != first.root
    whole = box.memory.diff(first)  # to the newest
    assert (whole.from_id, whole.to) == (first.id, second.id)
    assert sorted((c.path, c.change) for c in whole.changes) == [
        ("entities/alice.md", "modified"), ("entities/carol.md", "added")
    ]
    assert all(c.patch is None for c in whole.changes)
    [change] = box.memory.diff(first, to=second, path="entities/alice.md").changes
    assert (change.size_before, change.size_after) == (len(LINKED_ALICE), len(MOVED_ALICE))
    assert change.patch is not None
    assert "-Alice likes [[bob]] and zanzibar." in change.patch
    assert "+Alice moved to Oslo." in change.patch
    assert hit_paths(box.memory.search("oslo")) == ["entities/alice.md"]

    restored = box.memory.restore(first)
    assert restored.restored == first.id and restored.removed == 1
    assert restored.before.reason == "before_restore" and restored.before.root == second.root
    assert box.memory.read("entities/alice.md") == LINKED_ALICE
    with pytest.raises(NotFound):
        box.memory.read("entities/carol.md")
    assert hit_paths(box.memory.search("zanzibar")) == ["entities/alice.md"]

    # Undone for one file: the snapshot taken before the restore holds it.
    again = box.memory.restore(restored.before, path="/memory/entities/carol.md")
    assert (again.restored, again.files, again.removed) == (restored.before.id, 1, 0)
    assert box.memory.read_text("entities/carol.md") == "Carol\n"
    assert box.memory.read("entities/alice.md") == LINKED_ALICE
    with pytest.raises(NotFound):
        box.memory.restore(first, path="entities/carol.md")
    reasons = [s.reason for s in box.memory.snapshots()]
    assert reasons[-2:] == ["before_restore", "before_restore"], reasons


def test_the_async_client_searches_and_restores_memory():
    async def main() -> None:
        async with AsyncBerth() as client:
            box = await client.boxes.create(unique("aio-mem"))
            try:
                await box.start()
                assert (await box.exec(WRITE_LINKED)).exit_code == 0
                first = await box.memory.snapshot()
                assert (await box.memory.snapshots())[0] == first
                found = await box.memory.search("zanzibar", limit=5)
                assert hit_paths(found) == ["entities/alice.md"]
                links = await box.memory.links("entities/bob.md")
                assert links.backlinks == ["entities/alice.md"]
                edge = MemoryEdge(from_path="entities/alice.md", to="entities/bob.md")
                assert edge in (await box.memory.graph()).edges
                tree = await box.memory.snapshot_tree(first.id)
                assert "entities/bob.md" in [e.path for e in tree.entries]
                assert await box.memory.read_at(first, "entities/alice.md") == LINKED_ALICE
                assert await box.memory.read_text_at(first, "entities/bob.md") == "Bob\n"

                assert (await box.exec(REWRITE)).exit_code == 0
                second = await box.memory.snapshot()
                diff = await box.memory.diff(first, to=second.id, path="entities/alice.md")
                assert diff.changes[0].patch and "+Alice moved to Oslo." in diff.changes[0].patch
                restored = await box.memory.restore(first.id, path="entities")
                assert restored.before.reason == "before_restore" and restored.removed == 1
                assert await box.memory.read("entities/alice.md") == LINKED_ALICE
            finally:
                await box.delete()

    asyncio.run(main())
