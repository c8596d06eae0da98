//! What the scenarios share: a store on a real directory or on moto (the S3 stand-in), a
//! raw object_store client onto the same place (to corrupt or plant objects behind the
//! chunk store's back), and sparse images with known contents.

use std::fs::File;
use std::future::Future;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_chunks::{ChunkStore, Progress, StoreConfig};
use berth_testkit::moto::Moto;
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

pub const MIB: u64 = 1 << 20;
pub const CHUNK: u64 = berth_chunks::CHUNK_SIZE;
/// How long a test waits for a condition before it fails: generous for a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Where a scenario's store lives.
pub enum Place {
    Dir(tempfile::TempDir),
    Moto(Moto),
}

/// A store for one scenario, with a work directory for its images.
pub struct Rig {
    pub store: ChunkStore,
    /// The same place, reached without the chunk store.
    pub raw: Arc<dyn ObjectStore>,
    pub work: tempfile::TempDir,
    pub place: Place,
}

impl Rig {
    pub fn dir() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let store = ChunkStore::open(&StoreConfig {
            url: root.to_str().unwrap().to_owned(),
            credentials_file: None,
        })
        .unwrap();
        let raw = Arc::new(LocalFileSystem::new_with_prefix(&root).unwrap());
        Rig {
            store,
            raw,
            work: tempfile::tempdir().unwrap(),
            place: Place::Dir(dir),
        }
    }

    /// None (skipped, part `moto`) when the pinned moto is missing.
    pub fn moto() -> Option<Rig> {
        let moto = Moto::start()?;
        let store = open_moto(&moto, "store", &|name| moto.var(name));
        let raw = raw_moto(&moto, "store");
        Some(Rig {
            store,
            raw,
            work: tempfile::tempdir().unwrap(),
            place: Place::Moto(moto),
        })
    }

    /// A second handle onto the same store (another process would open one like it).
    pub fn reopen(&self) -> ChunkStore {
        match &self.place {
            Place::Dir(dir) => ChunkStore::open(&StoreConfig {
                url: format!("file://{}", dir.path().join("store").display()),
                credentials_file: None,
            })
            .unwrap(),
            Place::Moto(moto) => open_moto(moto, "store", &|name| moto.var(name)),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    pub async fn raw_put(&self, key: &str, body: impl Into<Bytes>) {
        self.raw
            .put(&Key::from(key), PutPayload::from(body.into()))
            .await
            .unwrap();
    }

    pub async fn raw_get(&self, key: &str) -> Option<Bytes> {
        match self.raw.get(&Key::from(key)).await {
            Ok(got) => Some(got.bytes().await.unwrap()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {key}: {e}"),
        }
    }

    pub async fn raw_delete(&self, key: &str) {
        self.raw.delete(&Key::from(key)).await.unwrap();
    }

    /// The keys under `prefix`, sorted.
    pub async fn raw_keys(&self, prefix: &str) -> Vec<String> {
        let listed: Vec<_> = self
            .raw
            .list(Some(&Key::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        let mut keys: Vec<String> = listed.iter().map(|m| m.location.to_string()).collect();
        keys.sort();
        keys
    }

    /// Every scenario ends with no upload or GC marker left behind.
    pub async fn assert_no_markers(&self) {
        assert_eq!(self.raw_keys("uploads").await, Vec::<String>::new());
        assert_eq!(self.raw_keys("gc").await, Vec::<String>::new());
    }
}

pub fn open_moto(moto: &Moto, prefix: &str, env: &dyn Fn(&str) -> Option<String>) -> ChunkStore {
    ChunkStore::open_with_env(
        &StoreConfig {
            url: moto.url(prefix),
            credentials_file: None,
        },
        env,
    )
    .unwrap()
}

/// A plain object_store client onto moto's bucket under `prefix` (after a ChunkStore was
/// opened, which installs the TLS crypto provider reqwest needs).
pub fn raw_moto(moto: &Moto, prefix: &str) -> Arc<dyn ObjectStore> {
    let s3 = AmazonS3Builder::new()
        .with_bucket_name(berth_testkit::moto::BUCKET)
        .with_region(moto.var("AWS_REGION").unwrap())
        .with_access_key_id(moto.var("AWS_ACCESS_KEY_ID").unwrap())
        .with_secret_access_key(moto.var("AWS_SECRET_ACCESS_KEY").unwrap())
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .build()
        .unwrap();
    Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
}

/// Runs `scenario` on a runtime of this test's own (two workers, as the machine has cores).
pub fn run<F: Future<Output = ()>>(rig: Rig, scenario: impl FnOnce(Rig) -> F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenario(rig));
}

/// Each scenario as two tests: `<scenario>::on_a_dir` and `<scenario>::on_moto`.
macro_rules! on_both {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[test]
                fn on_a_dir() {
                    crate::support::run(crate::support::Rig::dir(), super::$scenario);
                }

                #[test]
                fn on_moto() {
                    if let Some(rig) = crate::support::Rig::moto() {
                        crate::support::run(rig, super::$scenario);
                    }
                }
            }
        )+
    };
}
pub(crate) use on_both;

pub fn ignore_progress(_: Progress) {}

/// Deterministic bytes that do not compress: a xorshift stream from `seed`.
pub fn noise(seed: u64, len: u64) -> Vec<u8> {
    berth_testkit::pattern::bytes(len as usize, seed)
}

/// Deterministic text that compresses well, unique per `seed`.
pub fn text(seed: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize + 100);
    let mut line = 0u64;
    while (out.len() as u64) < len {
        out.extend_from_slice(
            format!("{seed}:{line} the box wrote this log line while its agent worked\n")
                .as_bytes(),
        );
        line += 1;
    }
    out.truncate(len as usize);
    out
}

/// A new sparse file of `size` with each `(offset, bytes)` written; the rest is holes.
pub fn sparse_image(path: &Path, size: u64, writes: &[(u64, Vec<u8>)]) {
    let file = File::create(path).unwrap();
    file.set_len(size).unwrap();
    for (at, bytes) in writes {
        file.write_all_at(bytes, *at).unwrap();
    }
    file.sync_all().unwrap();
}

/// Writes `bytes` at `at` into an existing image.
pub fn patch_image(path: &Path, at: u64, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, at).unwrap();
}

/// Fails the test unless `a` and `b` hold the same bytes (holes read as zeros). Compared,
/// not hashed (tests run unoptimized, where sha256 does 30 MB/s), and MiB by MiB, skipping
/// a MiB that is a hole in both (reading a GiB of holes fills a GiB of page cache).
pub fn assert_same_bytes(a: &Path, b: &Path) {
    let (len_a, len_b) = (file_len(a), file_len(b));
    assert_eq!(
        len_a,
        len_b,
        "{} and {} differ in length",
        a.display(),
        b.display()
    );
    let (file_a, file_b) = (File::open(a).unwrap(), File::open(b).unwrap());
    let (mut block_a, mut block_b) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    let mut at = 0;
    while at < len_a {
        let n = (len_a - at).min(MIB);
        if has_data(&file_a, at, n) || has_data(&file_b, at, n) {
            let n = n as usize;
            file_a.read_exact_at(&mut block_a[..n], at).unwrap();
            file_b.read_exact_at(&mut block_b[..n], at).unwrap();
            assert!(
                block_a[..n] == block_b[..n],
                "{} and {} differ in the MiB at {at}",
                a.display(),
                b.display()
            );
        }
        at += n;
    }
}

/// Whether `file` has data (not only a hole) in `len` bytes from `at`.
fn has_data(file: &File, at: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd as _;
    match nix::unistd::lseek(file.as_raw_fd(), at as i64, nix::unistd::Whence::SeekData) {
        Ok(data) => (data as u64) < at + len,
        Err(nix::errno::Errno::ENXIO) => false,
        Err(e) => panic!("SEEK_DATA: {e}"),
    }
}

/// A copy of `src` at `dst` that keeps its holes: a generation's image to compare its
/// restore with after the image has changed.
pub fn sparse_copy(src: &Path, dst: &Path) {
    let len = file_len(src);
    let from = File::open(src).unwrap();
    let to = File::create(dst).unwrap();
    to.set_len(len).unwrap();
    let mut block = vec![0u8; MIB as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(MIB);
        if has_data(&from, at, n) {
            from.read_exact_at(&mut block[..n as usize], at).unwrap();
            to.write_all_at(&block[..n as usize], at).unwrap();
        }
        at += n;
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// The bytes a file takes on disk (its holes take none).
pub fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// The names in `dir`, sorted: to see that no temporary file is left.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Waits until `condition` holds, polling; fails the test after [`PATIENCE`].
pub async fn wait_for<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
