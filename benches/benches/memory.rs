//! A box's memory, on one generated memory tree in one run: search (berth-memory-index)
//! against grep, indexing against reading the files, and snapshots (berth-chunks' memory
//! history) against `tar | zstd`.
//!
//! The tree: `BERTH_BENCH_MEMORY_FILES` (default 10,000) markdown files of 0.5-4 KiB below
//! `entities/`, `comms/`, `timeline/` and `workstreams/`, of words drawn from a vocabulary of
//! 4,000 pseudo-words with a Zipf distribution (the commonest is ~11% of all words), people's
//! names and `[[links]]` among them. A fixed seed: every run writes the same tree.
//! - search: `BERTH_BENCH_MEMORY_QUERIES` (default 200) queries of one or two words, common,
//!   rare and names, each a `search(q, 20)` in this process; baseline: `grep -r -l -i` of the
//!   query's first word, one process per query, as anyone without an index would look;
//! - indexing: one `apply` of the whole tree (its contents already in memory), then `apply`s
//!   of one changed file; baseline: `std::fs::read` of every file (warm page cache);
//! - snapshots: the tree packed by the system `tar` and read with `read_tar` (what the daemon
//!   gets from a box), then `take` into a chunk store on a local directory: the whole tree,
//!   then again after one file changed; baseline: `tar -cf - . | zstd -3` of the tree.
//!
//! A whole box's backup and restore is `benches/backup.rs`.

use std::collections::HashSet;
use std::fs;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult};
use berth_benches::stats::{ms, ratio, Summary};
use berth_chunks::memory::{read_tar, MemoryInput, TakeSnapshot};
use berth_chunks::{ChunkStore, StoreConfig};
use berth_memory_index::{Change, MemoryIndex};
use berth_protocol::memory_history::SnapshotReason;
use bytes::Bytes;

const MIB: f64 = (1u64 << 20) as f64;
const KIB: f64 = 1024.0;
/// Body words; ranked, the word of rank r drawn with weight 1/r.
const VOCABULARY: usize = 4000;
/// People's names, apart from the body words: an entity is two of them.
const NAMES: usize = 1500;
const SEED: u64 = 0x6265_7274_686d;
/// What the daemon's search asks for.
const LIMIT: usize = 20;
/// The chunk store's memory objects are compressed at this level.
const ZSTD_LEVEL: i32 = 3;
const BOX_ID: &str = "bx_bench";
/// One-file `apply`s timed after the initial one.
const INCREMENTAL_APPLIES: usize = 5;

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let files = count("BERTH_BENCH_MEMORY_FILES", 10_000).max(1);
    let queries = count("BERTH_BENCH_MEMORY_QUERIES", 200).max(1);
    let dir = tempfile::tempdir()?;
    let tree = dir.path().join("memory");
    let mut rng = Rng(SEED);
    let words = Words::new(&mut rng);
    let notes = tokio::task::block_in_place(|| write_tree(&tree, files, &words, &mut rng))?;
    println!(
        "memory: {} files, {:.1} MiB ({}), {} [[links]]; {VOCABULARY} words (Zipf) and {NAMES} names",
        notes.paths.len(),
        notes.bytes as f64 / MIB,
        notes.folders(),
        notes.links,
    );
    let queries: Vec<Query> = (0..queries)
        .map(|n| Query::new(n, &words, &notes, &mut rng))
        .collect();

    tokio::task::block_in_place(|| {
        let index_dir = dir.path().join("index");
        let (index, indexing) = index_tree(&tree, &index_dir, &notes.paths)?;
        search(&index, &tree, &queries)?;
        indexing.print(&index_dir);
        incremental(&index, &tree, &notes.paths, &indexing)
    })?;

    snapshots(&tree, &dir.path().join("store"), &notes).await
}

/// splitmix64: the same tree and queries on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The body words by rank (the short ones commonest) and the names, all distinct.
struct Words {
    ranked: Vec<String>,
    /// Running sums of 1/rank, for drawing by rank.
    cumulative: Vec<f64>,
    names: Vec<String>,
}

impl Words {
    fn new(rng: &mut Rng) -> Words {
        let mut seen = HashSet::new();
        let mut fresh = |rng: &mut Rng, syllables: usize| loop {
            let word = pseudo_word(rng, syllables);
            if seen.insert(word.clone()) {
                return word;
            }
        };
        let ranked: Vec<String> = (0..VOCABULARY)
            .map(|rank| fresh(rng, if rank < 300 { 2 } else { 3 }))
            .collect();
        let names = (0..NAMES).map(|_| fresh(rng, 3)).collect();
        let mut sum = 0.0;
        let cumulative = (1..=VOCABULARY)
            .map(|rank| {
                sum += 1.0 / rank as f64;
                sum
            })
            .collect();
        Words {
            ranked,
            cumulative,
            names,
        }
    }

    /// A body word, by Zipf.
    fn draw(&self, rng: &mut Rng) -> &str {
        let at = rng.unit() * self.cumulative[VOCABULARY - 1];
        let rank = self.cumulative.partition_point(|&c| c < at);
        &self.ranked[rank.min(VOCABULARY - 1)]
    }

    /// A body word of a rank in `ranks`, uniformly.
    fn ranked_in(&self, rng: &mut Rng, ranks: std::ops::Range<usize>) -> &str {
        &self.ranked[ranks.start + rng.below(ranks.len())]
    }

    fn name(&self, rng: &mut Rng) -> &str {
        &self.names[rng.below(NAMES)]
    }
}

/// Consonant-vowel syllables: a word of them reads as one, and no two are spelled alike.
fn pseudo_word(rng: &mut Rng, syllables: usize) -> String {
    const CONSONANTS: &[u8] = b"bdfghklmnprstvz";
    const VOWELS: &[u8] = b"aeiou";
    let mut word = String::with_capacity(syllables * 2);
    for _ in 0..syllables {
        word.push(CONSONANTS[rng.below(CONSONANTS.len())] as char);
        word.push(VOWELS[rng.below(VOWELS.len())] as char);
    }
    word
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// The tree as written.
struct Notes {
    /// Every file, relative to the tree, in the order written.
    paths: Vec<String>,
    /// The entities' file stems (`first-last`), what most links name.
    entities: Vec<String>,
    bytes: u64,
    links: usize,
    per_folder: [usize; 4],
}

const FOLDERS: [&str; 4] = ["entities", "comms", "timeline", "workstreams"];

impl Notes {
    fn folders(&self) -> String {
        let parts: Vec<String> = FOLDERS
            .iter()
            .zip(self.per_folder)
            .map(|(folder, n)| format!("{folder}/ {n}"))
            .collect();
        parts.join(", ")
    }
}

/// Writes `files` notes below `tree`: a quarter entities (people mostly), a third comms by
/// channel and month, a quarter a dated timeline, the rest in two dozen workstreams.
fn write_tree(tree: &Path, files: usize, words: &Words, rng: &mut Rng) -> BenchResult<Notes> {
    let workstreams: Vec<String> = (0..24)
        .map(|_| format!("{}-{}", words.ranked_in(rng, 50..800), words.name(rng)))
        .collect();
    let mut taken = HashSet::new();
    let mut paths = Vec::with_capacity(files);
    let mut entities = Vec::new();
    let mut per_folder = [0; 4];
    for n in 0..files {
        let roll = rng.below(100);
        let folder = match roll {
            0..25 => 0,
            25..60 => 1,
            60..85 => 2,
            _ => 3,
        };
        per_folder[folder] += 1;
        let (month, day) = (1 + rng.below(12), 1 + rng.below(28));
        let path = match folder {
            0 => {
                let kind = ["people", "people", "people", "orgs", "projects"][rng.below(5)];
                let stem = format!("{}-{}", words.name(rng), words.name(rng));
                entities.push(stem.clone());
                format!("entities/{kind}/{stem}.md")
            }
            1 => {
                let channel = ["email", "chat", "meetings"][rng.below(3)];
                let topic = words.ranked_in(rng, 20..1000);
                format!("comms/{channel}/2026-{month:02}/{day:02}-{topic}.md")
            }
            2 => {
                let year = 2019 + rng.below(8);
                format!("timeline/{year}/{year}-{month:02}-{day:02}.md")
            }
            _ => {
                let ws = &workstreams[rng.below(workstreams.len())];
                format!("workstreams/{ws}/{}.md", words.ranked_in(rng, 20..2000))
            }
        };
        // Two notes drawn alike get the second a number, as an agent would.
        let path = if taken.contains(&path) {
            format!("{}-{n}.md", path.trim_end_matches(".md"))
        } else {
            path
        };
        taken.insert(path.clone());
        paths.push(path);
    }

    let (mut bytes, mut links) = (0, 0);
    for path in &paths {
        let (text, linked) = note(path, words, &entities, &paths, rng);
        let file = tree.join(path);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&file, &text)?;
        bytes += text.len() as u64;
        links += linked;
    }
    Ok(Notes {
        paths,
        entities,
        bytes,
        links,
        per_folder,
    })
}

/// One note of 0.5-4 KiB (log-uniform): a title, for an entity a few fields, then
/// paragraphs of sentences; one word in 40 is a link, one in 60 a person. Its links.
fn note(
    path: &str,
    words: &Words,
    entities: &[String],
    paths: &[String],
    rng: &mut Rng,
) -> (String, usize) {
    let target = (512.0 * 8f64.powf(rng.unit())) as usize;
    let stem = path
        .rsplit('/')
        .next()
        .unwrap_or(path)
        .trim_end_matches(".md");
    let title: Vec<String> = stem.split('-').map(capitalized).collect();
    let mut text = format!("# {}\n\n", title.join(" "));
    if path.starts_with("entities/") {
        text += &format!(
            "- role: {} {}\n- updated: 2026-{:02}-{:02}\n\n",
            words.draw(rng),
            words.draw(rng),
            1 + rng.below(12),
            1 + rng.below(28),
        );
    }
    let mut links = 0;
    'paragraphs: loop {
        for _ in 0..2 + rng.below(4) {
            if text.len() >= target {
                break 'paragraphs;
            }
            let mut sentence = Vec::new();
            for _ in 0..6 + rng.below(13) {
                let word = match rng.below(120) {
                    0..3 => {
                        links += 1;
                        link(entities, paths, rng)
                    }
                    3..5 => format!(
                        "{} {}",
                        capitalized(words.name(rng)),
                        capitalized(words.name(rng))
                    ),
                    _ => words.draw(rng).to_owned(),
                };
                sentence.push(word);
            }
            sentence[0] = capitalized(&sentence[0]);
            text += &sentence.join(" ");
            text += ". ";
        }
        text += "\n\n";
    }
    text += "\n";
    (text, links)
}

/// `[[stem]]` or `[[stem|First Last]]` of an entity mostly, else `[[path]]` of any note.
fn link(entities: &[String], paths: &[String], rng: &mut Rng) -> String {
    match rng.below(10) {
        0..6 if !entities.is_empty() => format!("[[{}]]", entities[rng.below(entities.len())]),
        6..8 if !entities.is_empty() => {
            let stem = &entities[rng.below(entities.len())];
            let alias: Vec<String> = stem.split('-').map(capitalized).collect();
            format!("[[{stem}|{}]]", alias.join(" "))
        }
        _ => format!(
            "[[{}]]",
            paths[rng.below(paths.len())].trim_end_matches(".md")
        ),
    }
}

const KINDS: [&str; 8] = [
    "one common word",
    "one mid word",
    "one rare word",
    "one name",
    "common + rare word",
    "two mid words",
    "two rare words",
    "a full name",
];

/// One query; grep looks for its first word.
struct Query {
    kind: usize,
    text: String,
}

impl Query {
    /// The `n`th query: the kinds in turn. Common words are ranks 1-20 (in nearly every
    /// note), mid 100-600, rare 2000-4000 (in ~1% of the notes); a name is an entity's.
    fn new(n: usize, words: &Words, notes: &Notes, rng: &mut Rng) -> Query {
        let kind = n % KINDS.len();
        let mut pick = |ranks: std::ops::Range<usize>| words.ranked_in(rng, ranks).to_owned();
        let text = match kind {
            0 => pick(0..20),
            1 => pick(100..600),
            2 => pick(2000..VOCABULARY),
            4 => format!("{} {}", pick(0..20), pick(2000..VOCABULARY)),
            5 => format!("{} {}", pick(100..600), pick(100..600)),
            6 => format!("{} {}", pick(2000..VOCABULARY), pick(2000..VOCABULARY)),
            _ => {
                let stem = match notes.entities.len() {
                    0 => words.name(rng).to_owned(),
                    len => notes.entities[rng.below(len)].clone(),
                };
                let (first, last) = stem.split_once('-').unwrap_or((&stem, &stem));
                match kind {
                    3 => last.to_owned(),
                    _ => format!("{first} {last}"),
                }
            }
        };
        Query { kind, text }
    }

    fn first_word(&self) -> &str {
        self.text.split(' ').next().unwrap_or(&self.text)
    }
}

/// The initial `apply` and its baseline.
struct Indexing {
    files: usize,
    bytes: u64,
    apply: Duration,
    read: Duration,
}

impl Indexing {
    fn print(&self, index_dir: &Path) {
        let rate = |took: Duration| {
            let s = took.as_secs_f64().max(1e-9);
            format!(
                "{:.3} s, {:.0} files/s, {:.1} MiB/s",
                s,
                self.files as f64 / s,
                self.bytes as f64 / MIB / s
            )
        };
        let on_disk = disk_usage(index_dir).map_or(0, |(allocated, _)| allocated);
        println!(
            "indexing, one apply of the whole tree (contents in memory): {}; the index {:.1} MiB on disk",
            rate(self.apply),
            on_disk as f64 / MIB,
        );
        println!(
            "  baseline std::fs::read of every file (warm cache, median of 3): {}   ratio {:.1}×",
            rate(self.read),
            ratio(self.apply, self.read),
        );
    }
}

/// Reads the tree (the baseline), then indexes it in one `apply`.
fn index_tree(
    tree: &Path,
    index_dir: &Path,
    paths: &[String],
) -> BenchResult<(MemoryIndex, Indexing)> {
    let mut reads = Vec::new();
    let mut contents = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        contents = paths
            .iter()
            .map(|path| fs::read(tree.join(path)))
            .collect::<Result<Vec<_>, _>>()?;
        reads.push(started.elapsed());
    }
    let bytes = contents.iter().map(|c| c.len() as u64).sum();
    let changes: Vec<Change> = paths
        .iter()
        .zip(contents)
        .map(|(path, content)| upsert(path, content))
        .collect();
    let index = MemoryIndex::open(index_dir)?;
    let started = Instant::now();
    index.apply(changes, Some("v0".into()))?;
    let apply = started.elapsed();
    Ok((
        index,
        Indexing {
            files: paths.len(),
            bytes,
            apply,
            read: median(reads),
        },
    ))
}

fn upsert(path: &str, content: Vec<u8>) -> Change {
    Change::Upsert {
        path: path.to_owned(),
        hash: fnv1a(&content),
        content: Bytes::from(content),
    }
}

/// The caller's content hash, here a cheap one (the daemon gives the snapshot's sha256).
fn fnv1a(data: &[u8]) -> String {
    let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Times every query on the index and through grep, alternating, and prints both.
fn search(index: &MemoryIndex, tree: &Path, queries: &[Query]) -> BenchResult<()> {
    let grep = Command::new("grep").arg("--version").output().is_ok();
    // Warm both up: the index's files mapped, grep's binary and the tree in the page cache.
    for query in queries.iter().take(KINDS.len()) {
        index.search(&query.text, LIMIT)?;
        if grep {
            run_grep(query.first_word(), tree)?;
        }
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut hits = 0;
    for query in queries {
        let started = Instant::now();
        let found = index.search(&query.text, LIMIT)?;
        ours.push(started.elapsed());
        hits += found.hits.len();
        if grep {
            theirs.push(run_grep(query.first_word(), tree)?);
        }
    }
    if hits == 0 {
        return Err("no query found anything: the tree or the index is wrong".into());
    }
    println!(
        "search, search(q, {LIMIT}) on the index in this process, against grep -r -l -i of the query's first word (a process each), n={}:",
        queries.len()
    );
    let all = Summary::of(&ours);
    if !grep {
        println!(
            "  all queries              index p50 {} p99 {}",
            ms(all.p50),
            ms(all.p99)
        );
        println!("  baseline SKIPPED: grep not installed");
        return Ok(());
    }
    let base = Summary::of(&theirs);
    println!(
        "  all queries              index p50 {:>10} p99 {:>10}   grep p50 {:>10} p99 {:>10}   ratio p50 {:.4}× p99 {:.4}×",
        ms(all.p50),
        ms(all.p99),
        ms(base.p50),
        ms(base.p99),
        ratio(all.p50, base.p50),
        ratio(all.p99, base.p99),
    );
    for (kind, name) in KINDS.iter().enumerate() {
        let of_kind = |samples: &[Duration]| -> Vec<Duration> {
            queries
                .iter()
                .zip(samples)
                .filter(|(q, _)| q.kind == kind)
                .map(|(_, took)| *took)
                .collect()
        };
        let (mine, base) = (of_kind(&ours), of_kind(&theirs));
        if mine.is_empty() {
            continue;
        }
        let (mine, base) = (Summary::of(&mine), Summary::of(&base));
        println!(
            "  {name:<24} index p50 {:>10}                  grep p50 {:>10}                  ratio p50 {:.4}×  (n={})",
            ms(mine.p50),
            ms(base.p50),
            ratio(mine.p50, base.p50),
            mine.n,
        );
    }
    let starts: Vec<Duration> = (0..20)
        .map(|_| run_grep("x", Path::new("/dev/null")))
        .collect::<BenchResult<_>>()?;
    println!(
        "  of grep's time, a process started and ended (grep of /dev/null): p50 {}",
        ms(Summary::of(&starts).p50)
    );
    Ok(())
}

/// `grep -r -l -i word dir`, its output thrown away: how long it took.
fn run_grep(word: &str, dir: &Path) -> BenchResult<Duration> {
    let started = Instant::now();
    let status = Command::new("grep")
        .args(["-r", "-l", "-i", word])
        .arg(dir)
        .stdout(Stdio::null())
        .status()?;
    let took = started.elapsed();
    // 0: found, 1: not found, 2: trouble.
    match status.code() {
        Some(0 | 1) => Ok(took),
        _ => Err(format!("grep -r -l -i {word} {} failed: {status}", dir.display()).into()),
    }
}

/// Changes one file at a time on disk and times its `apply`, against the initial figures.
fn incremental(
    index: &MemoryIndex,
    tree: &Path,
    paths: &[String],
    initial: &Indexing,
) -> BenchResult<()> {
    let mut applies = Vec::new();
    for round in 0..INCREMENTAL_APPLIES {
        let path = &paths[(round * 7919 + 13) % paths.len()];
        let file = tree.join(path);
        let mut content = fs::read(&file)?;
        content.extend_from_slice(format!("Edited in round {round}.\n").as_bytes());
        fs::write(&file, &content)?;
        let started = Instant::now();
        index.apply(vec![upsert(path, content)], Some(format!("v{}", round + 1)))?;
        applies.push(started.elapsed());
    }
    let worst = applies.iter().max().copied().unwrap_or_default();
    let took = median(applies);
    println!(
        "  1 changed file applied (median of {INCREMENTAL_APPLIES}, a commit each): {} (max {})   ratio to reading the whole tree {:.3}×, to the whole apply {:.4}×",
        ms(took),
        ms(worst),
        ratio(took, initial.read),
        ratio(took, initial.apply),
    );
    Ok(())
}

/// One snapshot taken: how long each part took and what it stored.
struct Taken {
    export: Duration,
    take: Duration,
    stored_bytes: u64,
    /// Growth of the store directory: (allocated, file sizes).
    on_disk: (u64, u64),
}

impl Taken {
    fn total(&self) -> Duration {
        self.export + self.take
    }
}

async fn snapshots(tree: &Path, store_dir: &Path, notes: &Notes) -> BenchResult<()> {
    if Command::new("tar").arg("--version").output().is_err() {
        println!("snapshots: SKIPPED: tar not installed (a box's memory comes as a tar)");
        return Ok(());
    }
    let store = ChunkStore::open(&StoreConfig {
        url: store_dir.display().to_string(),
        credentials_file: None,
    })?;
    let first = take(&store, tree, store_dir).await?;

    // An agent's most usual edit: a line added to a person's note.
    let changed = notes
        .paths
        .iter()
        .find(|p| p.starts_with("entities/people/"))
        .unwrap_or(&notes.paths[0]);
    let file = tree.join(changed);
    let mut content = fs::read(&file)?;
    content.extend_from_slice(b"- seen again at the harbour, 2026-12-05\n");
    fs::write(&file, &content)?;
    let blob = zstd::bulk::compress(&content, ZSTD_LEVEL)?.len() as u64;
    let siblings = fs::read_dir(file.parent().unwrap_or(tree))?.count();
    let second = take(&store, tree, store_dir).await?;

    let size = |bytes: u64| format!("{:.1} KiB", bytes as f64 / KIB);
    println!(
        "snapshots, the tree from tar through read_tar (export), then take into a chunk store on a local directory:"
    );
    println!(
        "  first, whole tree: export {} + take {} = {}; stored_bytes {:.2} MiB; store dir +{:.2} MiB allocated (+{:.2} MiB of file sizes)",
        ms(first.export),
        ms(first.take),
        ms(first.total()),
        first.stored_bytes as f64 / MIB,
        first.on_disk.0 as f64 / MIB,
        first.on_disk.1 as f64 / MIB,
    );
    println!(
        "  after 1 file changed ({changed}, {}, in a directory of {siblings}): export {} + take {} = {}; stored_bytes {} (the file {}, the trees above it {}); store dir +{} allocated (+{} of file sizes)",
        size(content.len() as u64),
        ms(second.export),
        ms(second.take),
        ms(second.total()),
        size(second.stored_bytes),
        size(blob),
        size(second.stored_bytes.saturating_sub(blob)),
        size(second.on_disk.0),
        size(second.on_disk.1),
    );
    let Some((tar_zstd, tar_zstd_bytes)) = tar_zstd(tree)? else {
        println!("  baseline SKIPPED: zstd not installed");
        return Ok(());
    };
    println!(
        "  baseline tar -cf - . | zstd -{ZSTD_LEVEL} (median of 3): {}, {:.2} MiB",
        ms(tar_zstd),
        tar_zstd_bytes as f64 / MIB,
    );
    let of = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    println!(
        "  ratios to tar|zstd: first snapshot time {:.2}×, size {:.2}× (allocated {:.2}×); 1-file snapshot time {:.2}×, size {:.4}× (allocated {:.4}×)",
        ratio(first.total(), tar_zstd),
        of(first.stored_bytes, tar_zstd_bytes),
        of(first.on_disk.0, tar_zstd_bytes),
        ratio(second.total(), tar_zstd),
        of(second.stored_bytes, tar_zstd_bytes),
        of(second.on_disk.0, tar_zstd_bytes),
    );
    Ok(())
}

/// Exports the tree and takes a snapshot of it.
async fn take(store: &ChunkStore, tree: &Path, store_dir: &Path) -> BenchResult<Taken> {
    let before = disk_usage(store_dir)?;
    let started = Instant::now();
    let inputs = tokio::task::block_in_place(|| export(tree))?;
    let export = started.elapsed();
    let started = Instant::now();
    let snapshot = store
        .memory()
        .take(TakeSnapshot {
            box_id: BOX_ID,
            reason: SnapshotReason::Stop,
            inputs,
        })
        .await?;
    let take = started.elapsed();
    let after = disk_usage(store_dir)?;
    Ok(Taken {
        export,
        take,
        stored_bytes: snapshot.stored_bytes,
        on_disk: (after.0 - before.0, after.1 - before.1),
    })
}

/// The tree as a box's agent hands it over: a tar, read into memory.
fn export(tree: &Path) -> BenchResult<Vec<MemoryInput>> {
    let out = Command::new("tar")
        .args(["-cf", "-", "-C"])
        .arg(tree)
        .arg(".")
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("tar of {} failed: {}", tree.display(), out.status).into());
    }
    Ok(read_tar(&out.stdout[..])?)
}

/// `tar -cf - -C tree . | zstd -3`: the median time of 3 and the output's size; None
/// without zstd.
fn tar_zstd(tree: &Path) -> BenchResult<Option<(Duration, u64)>> {
    if Command::new("zstd").arg("--version").output().is_err() {
        return Ok(None);
    }
    let (mut times, mut size) = (Vec::new(), 0);
    for _ in 0..3 {
        let started = Instant::now();
        let mut tar = Command::new("tar")
            .args(["-cf", "-", "-C"])
            .arg(tree)
            .arg(".")
            .stdout(Stdio::piped())
            .spawn()?;
        let tar_out = tar.stdout.take().ok_or("tar has no stdout")?;
        let mut zstd = Command::new("zstd")
            .args([format!("-{ZSTD_LEVEL}").as_str(), "-q", "-c"])
            .stdin(tar_out)
            .stdout(Stdio::piped())
            .spawn()?;
        let mut compressed = zstd.stdout.take().ok_or("zstd has no stdout")?;
        let mut buf = vec![0u8; 1 << 16];
        size = 0;
        loop {
            match compressed.read(&mut buf)? {
                0 => break,
                n => size += n as u64,
            }
        }
        let (tar_status, zstd_status) = (tar.wait()?, zstd.wait()?);
        times.push(started.elapsed());
        if !tar_status.success() || !zstd_status.success() {
            return Err(format!("tar | zstd failed: {tar_status}, {zstd_status}").into());
        }
    }
    Ok(Some((median(times), size)))
}

/// The bytes below `dir`: (allocated on disk, directories included; the files' sizes).
/// (0, 0) when it does not exist yet.
fn disk_usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    let (mut allocated, mut sizes) = (0, 0);
    if !dir.exists() {
        return Ok((0, 0));
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            allocated += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                sizes += meta.len();
            }
        }
    }
    Ok((allocated, sizes))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
