//! The index end to end, on a real directory: what a box's memory search, links and graph
//! answer after batches of changes, reopening, and damage.

use std::path::Path;
use std::time::Instant;

use berth_memory_index::{Change, IndexError, MemoryIndex, SNIPPET_MAX_BYTES};
use berth_protocol::memory_search::{MemoryEdge, MemoryHit, MemoryLink, MemoryNode};

fn upsert(path: &str, content: &str) -> Change {
    upsert_bytes(path, content.as_bytes())
}

fn upsert_bytes(path: &str, content: &[u8]) -> Change {
    Change::Upsert {
        path: path.to_owned(),
        hash: format!("hash-of-{path}-{}", content.len()),
        content: bytes::Bytes::copy_from_slice(content),
    }
}

fn remove(path: &str) -> Change {
    Change::Remove {
        path: path.to_owned(),
    }
}

fn open(dir: &Path) -> MemoryIndex {
    MemoryIndex::open(dir).unwrap()
}

fn paths(index: &MemoryIndex, query: &str) -> Vec<String> {
    let results = index.search(query, 100).unwrap();
    results.hits.into_iter().map(|hit| hit.path).collect()
}

fn highlighted(hit: &MemoryHit) -> Vec<&str> {
    hit.highlights
        .iter()
        .map(|&[start, end]| &hit.snippet[start..end])
        .collect()
}

fn sample() -> Vec<Change> {
    vec![
        upsert(
            "entities/alice-smith.md",
            "# Alice\nWorks at the harbour. Prefers tea.\nSee [[bob]] and [[projects/boat]].\n",
        ),
        upsert(
            "entities/bob.md",
            "# Bob\nKeeps the lighthouse on the north cape.\nThe lighthouse lamp is \
             serviced every spring.\nFriend of [[alice-smith|Alice]].\n",
        ),
        upsert(
            "timeline/2026-12-01.md",
            "Met Bob near the harbour; talked about the boat.\n",
        ),
        upsert("projects/boat.md", "A small sailing boat, blue hull.\n"),
        upsert("README.md", "How this memory is organized.\n"),
    ]
}

#[test]
fn the_best_match_ranks_first_with_its_words_highlighted() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), Some("v1".into())).unwrap();

    let results = index.search("lighthouse", 10).unwrap();
    assert_eq!(results.query, "lighthouse");
    assert_eq!(results.indexed_files, 5);
    assert_eq!(results.hits.len(), 1);
    let hit = &results.hits[0];
    assert_eq!(hit.path, "entities/bob.md");
    assert!(hit.score > 0.0);
    assert!(hit.snippet.contains("lighthouse"), "{:?}", hit.snippet);
    assert!(hit.snippet.len() <= SNIPPET_MAX_BYTES);
    assert_eq!(highlighted(hit), ["lighthouse", "lighthouse"]);

    // Words are OR'ed, and a file with both ranks above a file with one.
    assert_eq!(
        paths(&index, "tea harbour"),
        ["entities/alice-smith.md", "timeline/2026-12-01.md"]
    );
}

#[test]
fn non_ascii_text_is_found_and_highlighted_on_character_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index
        .apply(
            vec![
                upsert(
                    "entities/zoë.md",
                    "Ünïcödé first: Zoë's café opens at dawn — naïve croissants.\n",
                ),
                upsert(
                    "entities/other.md",
                    "A cafeteria, not a café? No: a canteen.\n",
                ),
            ],
            None,
        )
        .unwrap();

    for query in ["croissants", "CROISSANTS"] {
        let results = index.search(query, 10).unwrap();
        assert_eq!(results.hits.len(), 1, "{query}");
        assert_eq!(highlighted(&results.hits[0]), ["croissants"]);
    }
    // Accents are folded both ways: `cafe` finds `café`, and `zoe` finds `Zoë`.
    for query in ["café", "cafe"] {
        let results = index.search(query, 10).unwrap();
        assert_eq!(results.hits.len(), 2, "{query}");
        for hit in &results.hits {
            assert_eq!(highlighted(hit), ["café"], "{query}: {hit:?}");
        }
    }
    let zoe = index.search("zoe", 10).unwrap();
    assert_eq!(zoe.hits[0].path, "entities/zoë.md");
    assert_eq!(highlighted(&zoe.hits[0]), ["Zoë"]);
}

#[test]
fn a_removed_file_is_gone_and_a_changed_one_is_found_by_its_new_words() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), None).unwrap();
    assert_eq!(paths(&index, "sailing"), ["projects/boat.md"]);

    index
        .apply(
            vec![
                remove("projects/boat.md"),
                upsert("entities/bob.md", "# Bob\nNow runs a bakery downtown.\n"),
                remove("never/indexed.md"),
            ],
            None,
        )
        .unwrap();
    assert!(paths(&index, "sailing").is_empty());
    assert!(paths(&index, "lighthouse").is_empty());
    assert_eq!(paths(&index, "bakery"), ["entities/bob.md"]);
    assert_eq!(index.search("bakery", 10).unwrap().indexed_files, 4);

    let files = index.files().unwrap();
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [
            "README.md",
            "entities/alice-smith.md",
            "entities/bob.md",
            "timeline/2026-12-01.md"
        ]
    );
    let bakery = "# Bob\nNow runs a bakery downtown.\n".len();
    assert_eq!(
        files["entities/bob.md"],
        format!("hash-of-entities/bob.md-{bakery}")
    );
}

#[test]
fn of_two_changes_to_one_path_in_a_batch_the_last_wins() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index
        .apply(
            vec![
                upsert("a.md", "first draft"),
                upsert("a.md", "second draft"),
                upsert("b.md", "kept"),
                remove("b.md"),
            ],
            None,
        )
        .unwrap();
    assert_eq!(paths(&index, "draft"), ["a.md"]);
    assert!(paths(&index, "first").is_empty());
    assert!(paths(&index, "kept").is_empty());
    assert_eq!(index.files().unwrap().len(), 1);
}

#[test]
fn words_of_paths_are_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), None).unwrap();
    // The body of alice-smith.md says "Alice", not "smith" (bob.md's link to her does);
    // the file named for the word ranks above a file that mentions it.
    assert_eq!(
        paths(&index, "smith"),
        ["entities/alice-smith.md", "entities/bob.md"]
    );
    assert_eq!(paths(&index, "timeline"), ["timeline/2026-12-01.md"]);
    assert_eq!(paths(&index, "readme"), ["README.md"]);
    // A match by the path alone still has a snippet: the file's first lines.
    let hit = &index.search("smith", 1).unwrap().hits[0];
    assert!(
        hit.snippet.starts_with("# Alice\nWorks"),
        "{:?}",
        hit.snippet
    );
    assert!(hit.highlights.is_empty());
}

#[test]
fn malformed_queries_are_searched_as_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), None).unwrap();
    for query in [
        "\"unbalanced",
        "a:b:",
        "(((",
        "AND",
        "OR NOT",
        "path:",
        "lamp^",
        "*",
        "-",
        "+",
        "\\",
        "[a TO",
        "body:lighthouse)",
        "\u{0}",
        "🦀",
    ] {
        let results = index.search(query, 10);
        assert!(results.is_ok(), "{query:?}: {results:?}");
    }
    // The fallback still searches the words.
    assert_eq!(paths(&index, "\"lighthouse"), ["entities/bob.md"]);
    assert_eq!(paths(&index, "lamp:spring:"), ["entities/bob.md"]);
    // And the syntax works when it parses.
    assert_eq!(paths(&index, "\"lighthouse lamp\""), ["entities/bob.md"]);
    assert_eq!(paths(&index, "harbour -tea"), ["timeline/2026-12-01.md"]);
}

#[test]
fn a_blank_query_is_refused_and_the_limit_is_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    assert!(matches!(
        index.search("  \n", 10),
        Err(IndexError::EmptyQuery)
    ));
    assert!(matches!(index.search("", 10), Err(IndexError::EmptyQuery)));

    let many = (0..150)
        .map(|n| upsert(&format!("notes/{n}.md"), "common word"))
        .collect();
    index.apply(many, None).unwrap();
    assert_eq!(index.search("common", 0).unwrap().hits.len(), 1);
    assert_eq!(index.search("common", usize::MAX).unwrap().hits.len(), 100);
}

#[test]
fn a_file_that_is_not_text_is_indexed_by_its_path_only() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index
        .apply(
            vec![
                upsert_bytes(
                    "images/photo.png",
                    b"\x89PNG\r\n\x1a\n\0\0lighthouse [[bob]]",
                ),
                upsert_bytes("notes/latin1.md", b"caf\xe9 lighthouse [[bob]]"),
            ],
            None,
        )
        .unwrap();
    assert!(paths(&index, "lighthouse").is_empty());
    assert_eq!(paths(&index, "photo"), ["images/photo.png"]);
    assert_eq!(index.search("photo", 1).unwrap().hits[0].snippet, "");
    assert_eq!(index.files().unwrap().len(), 2);
    let graph = index.graph().unwrap();
    assert!(graph.edges.is_empty());
    assert_eq!(graph.nodes.len(), 2);
}

#[test]
fn links_resolve_against_the_files_indexed_now() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), None).unwrap();

    let alice = index.links("entities/alice-smith.md").unwrap();
    assert_eq!(alice.path, "entities/alice-smith.md");
    assert_eq!(
        alice.outgoing,
        [
            MemoryLink {
                text: "bob".into(),
                target: "entities/bob.md".into(),
                exists: true
            },
            MemoryLink {
                text: "projects/boat".into(),
                target: "projects/boat.md".into(),
                exists: true
            },
        ]
    );
    assert_eq!(alice.backlinks, ["entities/bob.md"]);
    assert_eq!(
        index.links("projects/boat.md").unwrap().backlinks,
        ["entities/alice-smith.md"]
    );
    assert!(matches!(
        index.links("entities/nobody.md"),
        Err(IndexError::NotIndexed { path }) if path == "entities/nobody.md"
    ));

    // A link to a file that does not exist yet, then does.
    index
        .apply(
            vec![upsert(
                "timeline/2026-12-02.md",
                "Lunch with [[carol]], [[/memory/bob]], [[timeline/2026-12-01]] and [[self|me]]; \
                 see [[timeline/2026-12-02.md]].",
            )],
            None,
        )
        .unwrap();
    let day = index.links("timeline/2026-12-02.md").unwrap();
    let targets: Vec<(&str, bool)> = day
        .outgoing
        .iter()
        .map(|link| (link.target.as_str(), link.exists))
        .collect();
    assert_eq!(
        targets,
        [
            ("entities/carol.md", false),
            ("entities/bob.md", true),
            ("timeline/2026-12-01.md", true),
            ("entities/self.md", false),
            ("timeline/2026-12-02.md", true),
        ]
    );
    // Its link to itself is no backlink.
    assert!(day.backlinks.is_empty());
    assert_eq!(
        index.links("entities/bob.md").unwrap().backlinks,
        ["entities/alice-smith.md", "timeline/2026-12-02.md"]
    );
    let graph = index.graph().unwrap();
    assert!(graph.nodes.contains(&MemoryNode {
        path: "entities/carol.md".into(),
        exists: false
    }));
    assert!(graph.edges.contains(&MemoryEdge {
        from: "timeline/2026-12-02.md".into(),
        to: "entities/carol.md".into()
    }));
    assert!(!graph.edges.iter().any(|edge| edge.from == edge.to));

    index
        .apply(vec![upsert("entities/carol.md", "# Carol\n")], None)
        .unwrap();
    let day = index.links("timeline/2026-12-02.md").unwrap();
    assert_eq!(
        day.outgoing[0],
        MemoryLink {
            text: "carol".into(),
            target: "entities/carol.md".into(),
            exists: true
        }
    );
    assert_eq!(
        index.links("entities/carol.md").unwrap().backlinks,
        ["timeline/2026-12-02.md"]
    );
    let graph = index.graph().unwrap();
    assert!(graph.nodes.contains(&MemoryNode {
        path: "entities/carol.md".into(),
        exists: true
    }));
    assert_eq!(
        graph
            .nodes
            .iter()
            .filter(|node| node.path == "entities/carol.md")
            .count(),
        1
    );
}

#[test]
fn the_graph_is_sorted_and_without_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index
        .apply(
            vec![
                upsert("b.md", "[[a]] [[/a]] [[memory/a]] [[zed]] [[zed|Z]]"),
                upsert("a.md", "[[b]] [[b.md]] [[a]]"),
                upsert("entities/a.md", "an entity"),
            ],
            None,
        )
        .unwrap();
    let graph = index.graph().unwrap();
    let nodes: Vec<(&str, bool)> = graph
        .nodes
        .iter()
        .map(|node| (node.path.as_str(), node.exists))
        .collect();
    assert_eq!(
        nodes,
        [
            ("a.md", true),
            ("b.md", true),
            ("entities/a.md", true),
            ("entities/zed.md", false),
        ]
    );
    let edges: Vec<(&str, &str)> = graph
        .edges
        .iter()
        .map(|edge| (edge.from.as_str(), edge.to.as_str()))
        .collect();
    // `[[a]]` is a.md (rule 2) before entities/a.md (rule 3).
    assert_eq!(
        edges,
        [
            ("a.md", "b.md"),
            ("b.md", "a.md"),
            ("b.md", "entities/zed.md")
        ]
    );
    assert!(index.links("entities/a.md").unwrap().backlinks.is_empty());
}

#[test]
fn the_version_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let index = open(dir.path());
        assert!(!index.was_reset());
        assert_eq!(index.version(), None);
        index.apply(sample(), Some("snapshot-1".into())).unwrap();
        assert_eq!(index.version().as_deref(), Some("snapshot-1"));
        // A batch of no changes still records its version.
        index.apply(Vec::new(), Some("snapshot-2".into())).unwrap();
        assert_eq!(index.version().as_deref(), Some("snapshot-2"));
    }
    let index = open(dir.path());
    assert!(!index.was_reset());
    assert_eq!(index.version().as_deref(), Some("snapshot-2"));
    assert_eq!(index.files().unwrap().len(), 5);
    assert_eq!(paths(&index, "lighthouse"), ["entities/bob.md"]);

    index.apply(Vec::new(), None).unwrap();
    drop(index);
    assert_eq!(open(dir.path()).version(), None);
}

#[test]
fn an_index_open_elsewhere_is_busy_not_reset() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), Some("v".into())).unwrap();
    assert!(matches!(
        MemoryIndex::open(dir.path()),
        Err(IndexError::Busy { .. })
    ));
    assert_eq!(index.files().unwrap().len(), 5);
    drop(index);
    let index = open(dir.path());
    assert!(!index.was_reset());
    assert_eq!(index.files().unwrap().len(), 5);
}

#[test]
fn a_damaged_index_reopens_empty_and_says_so() {
    fn overwrite_segment_files(dir: &Path, junk: &[u8]) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".json") && !name.ends_with(".lock") {
                std::fs::write(&path, junk).unwrap();
            }
        }
    }
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 5] = [
        ("corrupt meta.json", |dir| {
            std::fs::write(dir.join("meta.json"), b"{ not json").unwrap()
        }),
        ("meta.json gone", |dir| {
            std::fs::remove_file(dir.join("meta.json")).unwrap()
        }),
        // tantivy 0.27 panics on a file shorter than its footer.
        ("segment files truncated", |dir| {
            overwrite_segment_files(dir, b"junk")
        }),
        ("segment files garbled", |dir| {
            overwrite_segment_files(dir, &[0xa5; 300])
        }),
        ("junk files everywhere", |dir| {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                std::fs::write(&path, b"\0\xffjunk").unwrap();
            }
            std::fs::write(dir.join("stray"), b"junk").unwrap();
        }),
    ];
    for (damage, apply_damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = open(dir.path());
            index.apply(sample(), Some("v1".into())).unwrap();
        }
        apply_damage(dir.path());

        let index = MemoryIndex::open(dir.path()).unwrap_or_else(|err| panic!("{damage}: {err}"));
        assert!(index.was_reset(), "{damage}");
        assert_eq!(index.version(), None, "{damage}");
        assert!(index.files().unwrap().is_empty(), "{damage}");
        assert_eq!(index.search("lighthouse", 10).unwrap().indexed_files, 0);
        // And it works again, and is not reset once more.
        index.apply(sample(), Some("v2".into())).unwrap();
        assert_eq!(paths(&index, "lighthouse"), ["entities/bob.md"], "{damage}");
        drop(index);
        let index = open(dir.path());
        assert!(!index.was_reset(), "{damage}");
        assert_eq!(index.version().as_deref(), Some("v2"), "{damage}");
    }
}

#[test]
fn an_index_of_another_schema_version_is_reset() {
    let dir = tempfile::tempdir().unwrap();
    {
        let index = open(dir.path());
        index.apply(sample(), Some("v1".into())).unwrap();
    }
    // A commit as an older berth would have made it: the same files, another version.
    {
        let index = tantivy::Index::open_in_dir(dir.path()).unwrap();
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 15_000_000).unwrap();
        let mut commit = writer.prepare_commit().unwrap();
        commit.set_payload(&format!(
            r#"{{"schema":{},"version":"v1"}}"#,
            berth_memory_index::SCHEMA_VERSION + 1
        ));
        commit.commit().unwrap();
    }
    let index = open(dir.path());
    assert!(index.was_reset());
    assert!(index.files().unwrap().is_empty());
}

#[test]
fn an_unusable_path_fails_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    for bad in [String::new(), "a\0b".to_owned(), "x".repeat(5000)] {
        let result = index.apply(
            vec![upsert("ok.md", "fine"), upsert(&bad, "bad")],
            Some("v".into()),
        );
        assert!(
            matches!(result, Err(IndexError::InvalidPath { .. })),
            "{result:?}"
        );
    }
    assert!(index.files().unwrap().is_empty());
    assert_eq!(index.version(), None);
}

#[test]
fn searches_run_while_a_batch_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    index.apply(sample(), None).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for batch in 0..20 {
                let changes = (0..50)
                    .map(|n| upsert(&format!("notes/{batch}-{n}.md"), "lighthouse keeper log"))
                    .collect();
                index.apply(changes, Some(format!("v{batch}"))).unwrap();
            }
        });
        scope.spawn(|| {
            for _ in 0..200 {
                let results = index.search("lighthouse", 5).unwrap();
                assert!(!results.hits.is_empty());
                index.graph().unwrap();
            }
        });
    });
    assert_eq!(index.files().unwrap().len(), 5 + 20 * 50);
    assert_eq!(index.version().as_deref(), Some("v19"));
}

#[test]
fn ten_thousand_files_index_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path());
    let changes: Vec<Change> = (0..10_000)
        .map(|n| {
            upsert(
                &format!("notes/{:02}/note-{n}.md", n % 100),
                &format!(
                    "# Note {n}\nAbout topic{} and the word number{n}.\nLinks to [[note-{}]].\n",
                    n % 37,
                    (n + 1) % 10_000
                ),
            )
        })
        .collect();
    let started = Instant::now();
    index.apply(changes, Some("big".into())).unwrap();
    eprintln!(
        "indexing 10,000 files in one batch took {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let results = index.search("number4242", 10).unwrap();
    eprintln!("one search over them took {:?}", started.elapsed());
    assert_eq!(results.indexed_files, 10_000);
    assert_eq!(results.hits[0].path, "notes/42/note-4242.md");
    assert_eq!(index.search("topic5", 100).unwrap().hits.len(), 100);

    let started = Instant::now();
    assert_eq!(index.files().unwrap().len(), 10_000);
    let graph = index.graph().unwrap();
    eprintln!("files() and graph() took {:?}", started.elapsed());
    assert_eq!(graph.edges.len(), 10_000);
    // `[[note-N]]` resolves to entities/note-N.md, which does not exist.
    assert_eq!(graph.nodes.len(), 20_000);
}
