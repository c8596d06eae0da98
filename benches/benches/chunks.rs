//! The chunk store (berth-chunks) against the plain way of keeping a durable copy, on the
//! same store in one run: a 1 GiB sparse image (150 MiB of log-like text, 150 MiB of random
//! bytes, 16 MiB of written zeros, the rest holes, in extents of 1-8 MiB spread over it).
//! - chunk store: upload (4 MiB chunks, holes never read, zeros not stored, zstd level 3,
//!   4 in flight), restore (sparse, every chunk verified, fsync'd, renamed into place), and
//!   the re-upload after a 1 MiB change (only the changed chunks are stored);
//! - baseline: the whole image zstd-compressed (the zstd crate, same level) into one object
//!   PUT to the same store, and read back: GET, decompress, write the file, fsync. Its
//!   re-upload after any change is the whole upload again.
//!
//! Printed as MB/s of image (1 GiB / time) and the ratio chunk store / baseline (above 1 is
//! faster), each the median of the rounds, chunk store and baseline alternating. On a local
//! directory always; on moto (the S3 stand-in, from `scripts/install-deps.sh --tests`) when
//! it is installed. `BERTH_BENCH_CHUNKS_ROUNDS` (default 3) sets the rounds on the local
//! directory, `BERTH_BENCH_CHUNKS_MOTO_ROUNDS` (default 1) those on moto.

use std::fs::File;
use std::io::{BufReader, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult};
use berth_benches::volume::{
    check_same, make_image, noise, EXTENT_SHIFT, EXTENT_SPACING, IMAGE_BYTES,
};
use berth_chunks::{ChunkStore, Manifest, Progress, StoreConfig};
use berth_testkit::moto::Moto;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

const MIB: u64 = 1 << 20;
const ZSTD_LEVEL: i32 = 3;
const VOLUME: &str = "bx_bench";

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let image = dir.path().join("image");
    let (text_mib, random_mib, zeros_mib) = tokio::task::spawn_blocking({
        let image = image.clone();
        move || make_image(&image)
    })
    .await??;
    println!(
        "chunk store vs whole-image zstd (level {ZSTD_LEVEL}): a {} MiB image of {text_mib} MiB text, {random_mib} MiB random, {zeros_mib} MiB written zeros, the rest holes",
        IMAGE_BYTES / MIB,
    );

    let root = dir.path().join("store");
    let local = Place {
        name: "local dir",
        store: ChunkStore::open(&StoreConfig {
            url: root.display().to_string(),
            credentials_file: None,
        })?,
        raw: Arc::new(object_store::local::LocalFileSystem::new_with_prefix(
            &root,
        )?),
    };
    let rounds = count("BERTH_BENCH_CHUNKS_ROUNDS", 3);
    measure(&local, &image, dir.path(), rounds)
        .await?
        .print(local.name);

    match berth_testkit::moto::python() {
        Err(why) => println!("moto: skipped ({why})"),
        Ok(_) => {
            let moto = Moto::start().ok_or("moto did not start")?;
            let moto_place = Place {
                name: "moto (S3)",
                store: ChunkStore::open_with_env(
                    &StoreConfig {
                        url: moto.url("bench"),
                        credentials_file: None,
                    },
                    &|name| moto.var(name),
                )?,
                raw: raw_moto(&moto)?,
            };
            let rounds = count("BERTH_BENCH_CHUNKS_MOTO_ROUNDS", 1);
            measure(&moto_place, &image, dir.path(), rounds)
                .await?
                .print(moto_place.name);
        }
    }
    Ok(())
}

/// A store, and a plain object_store client onto the same place for the baseline.
struct Place {
    name: &'static str,
    store: ChunkStore,
    raw: Arc<dyn ObjectStore>,
}

/// The medians of one place's rounds.
struct Figures {
    upload: Duration,
    restore: Duration,
    reupload: Duration,
    reupload_chunks: u64,
    reupload_bytes: u64,
    stored_bytes: u64,
    baseline_upload: Duration,
    baseline_restore: Duration,
    baseline_bytes: u64,
    rounds: usize,
}

impl Figures {
    fn print(&self, place: &str) {
        let mbps = |took: Duration| IMAGE_BYTES as f64 / 1e6 / took.as_secs_f64().max(1e-9);
        let line = |what: &str, chunks: Duration, baseline: Duration| {
            println!(
                "  {what:<28} chunk store {:>7.0} MB/s ({:>6.2} s)   baseline {:>7.0} MB/s ({:>6.2} s)   ×{:.1}",
                mbps(chunks),
                chunks.as_secs_f64(),
                mbps(baseline),
                baseline.as_secs_f64(),
                baseline.as_secs_f64() / chunks.as_secs_f64().max(1e-9),
            );
        };
        let rounds = match self.rounds {
            1 => "1 round".to_owned(),
            n => format!("median of {n} rounds"),
        };
        println!("{place} ({rounds}):");
        line("upload", self.upload, self.baseline_upload);
        line("restore", self.restore, self.baseline_restore);
        line(
            "re-upload after 1 MiB change",
            self.reupload,
            self.baseline_upload,
        );
        println!(
            "  stored: chunk store {} MiB, baseline {} MiB; the re-upload stored {} chunks, {:.1} MiB",
            self.stored_bytes / MIB,
            self.baseline_bytes / MIB,
            self.reupload_chunks,
            self.reupload_bytes as f64 / MIB as f64,
        );
    }
}

async fn measure(place: &Place, image: &Path, dir: &Path, rounds: usize) -> BenchResult<Figures> {
    let quiet = |_: Progress| {};
    let dest = dir.join("restored");
    let (mut upload, mut restore, mut reupload) = (Vec::new(), Vec::new(), Vec::new());
    let (mut baseline_upload, mut baseline_restore) = (Vec::new(), Vec::new());
    let (mut reupload_chunks, mut reupload_bytes, mut stored_bytes, mut baseline_bytes) =
        (0, 0, 0, 0);
    let changed = dir.join("changed");
    for round in 0..rounds as u64 {
        let generation = round * 2 + 1;
        let started = Instant::now();
        let first = place
            .store
            .upload(VOLUME, generation, image, None, &quiet)
            .await?;
        upload.push(started.elapsed());
        stored_bytes = first.bytes_uploaded;

        let started = Instant::now();
        place.store.restore(&first.manifest, &dest, &quiet).await?;
        restore.push(started.elapsed());
        check_same(image, &dest)?;
        std::fs::remove_file(&dest)?;

        let started = Instant::now();
        baseline_bytes = baseline_put(place, image).await?;
        baseline_upload.push(started.elapsed());
        let started = Instant::now();
        baseline_get(place, &dest).await?;
        baseline_restore.push(started.elapsed());
        check_same(image, &dest)?;
        std::fs::remove_file(&dest)?;

        let again = reupload_changed(place, image, &changed, &first.manifest, generation + 1);
        let (took, chunks, bytes) = again.await?;
        reupload.push(took);
        (reupload_chunks, reupload_bytes) = (chunks, bytes);
    }
    Ok(Figures {
        upload: median(upload),
        restore: median(restore),
        reupload: median(reupload),
        reupload_chunks,
        reupload_bytes,
        stored_bytes,
        baseline_upload: median(baseline_upload),
        baseline_restore: median(baseline_restore),
        baseline_bytes,
        rounds,
    })
}

/// A copy of the image with 1 MiB changed, uploaded on `base`: the time, chunks and bytes.
async fn reupload_changed(
    place: &Place,
    image: &Path,
    changed: &Path,
    base: &Manifest,
    generation: u64,
) -> BenchResult<(Duration, u64, u64)> {
    copy_sparse(image, changed)?;
    let file = std::fs::OpenOptions::new().write(true).open(changed)?;
    // Inside the first random extent (at 17.5 MiB, 3 MiB long), across the boundary at 20.
    file.write_all_at(&noise(999, MIB), EXTENT_SPACING + EXTENT_SHIFT + 2 * MIB)?;
    drop(file);
    let started = Instant::now();
    let up = place
        .store
        .upload(VOLUME, generation, changed, Some(base), &|_| {})
        .await?;
    Ok((started.elapsed(), up.chunks_uploaded, up.bytes_uploaded))
}

/// The baseline upload: the whole file through zstd into one object; its size.
async fn baseline_put(place: &Place, image: &Path) -> BenchResult<u64> {
    let image = image.to_owned();
    let compressed = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        let mut encoder = zstd::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
        std::io::copy(
            &mut BufReader::with_capacity(MIB as usize, File::open(&image)?),
            &mut encoder,
        )?;
        encoder.finish()
    })
    .await??;
    let size = compressed.len() as u64;
    place
        .raw
        .put(
            &Key::from("baseline/image.zst"),
            PutPayload::from(compressed),
        )
        .await?;
    Ok(size)
}

/// The baseline restore: GET the object, decompress it into `dest`, fsync.
async fn baseline_get(place: &Place, dest: &Path) -> BenchResult<()> {
    let compressed = place
        .raw
        .get(&Key::from("baseline/image.zst"))
        .await?
        .bytes()
        .await?;
    let dest = dest.to_owned();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(MIB as usize, File::create(&dest)?);
        zstd::stream::copy_decode(&compressed[..], &mut out)?;
        out.flush()?;
        out.get_ref().sync_all()
    })
    .await??;
    Ok(())
}

/// `src` copied to `dst`, its holes kept (MiB by MiB: a MiB with no data is skipped).
fn copy_sparse(src: &Path, dst: &Path) -> std::io::Result<()> {
    let from = File::open(src)?;
    let to = File::create(dst)?;
    let len = from.metadata()?.len();
    to.set_len(len)?;
    let mut block = vec![0u8; MIB as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(MIB) as usize;
        from.read_exact_at(&mut block[..n], at)?;
        if block[..n].iter().any(|&b| b != 0) {
            to.write_all_at(&block[..n], at)?;
        }
        at += n as u64;
    }
    Ok(())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn raw_moto(moto: &Moto) -> BenchResult<Arc<dyn ObjectStore>> {
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(berth_testkit::moto::BUCKET)
        .with_region("us-east-1")
        .with_access_key_id(moto.var("AWS_ACCESS_KEY_ID").unwrap_or_default())
        .with_secret_access_key(moto.var("AWS_SECRET_ACCESS_KEY").unwrap_or_default())
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .build()?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(
        s3, "bench",
    )))
}
