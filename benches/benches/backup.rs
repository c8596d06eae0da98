//! A whole box's backup and restore (`GET /v1/boxes/{ref}/backup`, `POST
//! /v1/backups/restore`) against `tar | zstd` of the same volume, in one run.
//!
//! A daemon in this process (sandbox runtime) with one box whose volume is the synthetic
//! 1 GiB image of `berth_benches::volume` (150 MiB of log-like text, 150 MiB of random
//! bytes, 16 MiB of written zeros, the rest holes). Each round:
//! - backup: the archive streamed over HTTP into a file (the box's volume staged, its
//!   extents hashed and zstd-compressed at level 3, its manifest written), fsync'd;
//!   baseline: `tar -cSf - volume.ext4 | zstd -3 > file` (GNU tar's sparse mode, so the
//!   holes are skipped as the backup skips them), fsync'd;
//! - restore: the file streamed to the daemon as a new box (read, checked whole, the image
//!   written sparse, fsync'd, moved into place; the box created); baseline:
//!   `zstd -d < file | tar -xSf -`, then the image fsync'd.
//!
//! Printed as MB/s of the image's data (its 316 MiB written, not its 1 GiB length) and the
//! ratio berth / baseline in time (below 1 is faster), the median of
//! `BERTH_BENCH_BACKUP_ROUNDS` (default 3) rounds. Needs root, runc and zstd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::{expect, Client};
use berth_benches::stats::{ms, ratio};
use berth_benches::volume::{check_same, make_image};
use bytes::Bytes;
use futures_util::StreamExt as _;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const MIB: f64 = (1u64 << 20) as f64;
const CHUNK: usize = 256 * 1024;

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let rounds = count("BERTH_BENCH_BACKUP_ROUNDS", 3).max(1);
    if Command::new("zstd").arg("--version").output().is_err() {
        println!("backup/restore: SKIPPED: zstd is not installed (the baseline's compressor)");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(&data_dir)?;
    let daemon = Daemon::start(&data_dir).await?;
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;
    let (status, body) = client
        .call(Method::POST, "/v1/boxes", json!({"name": "bk"}))
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    let id = body["id"].as_str().ok_or("no box id")?.to_owned();
    // The box never started: its volume is the synthetic image, put where a start would
    // have made it.
    let image = data_dir.join("boxes").join(&id).join("volume.ext4");
    std::fs::create_dir_all(image.parent().ok_or("no box dir")?)?;
    let (text_mib, random_mib, zeros_mib) = tokio::task::spawn_blocking({
        let image = image.clone();
        move || make_image(&image)
    })
    .await??;
    let data_mib = (text_mib + random_mib + zeros_mib) as f64;
    println!(
        "backup/restore vs tar -S | zstd -3: a 1024 MiB volume image of {text_mib} MiB text, {random_mib} MiB random, {zeros_mib} MiB written zeros, the rest holes; {rounds} rounds"
    );

    let (mut backups, mut tars, mut restores, mut untars) = (vec![], vec![], vec![], vec![]);
    let (mut backup_bytes, mut tar_bytes) = (0, 0);
    let archive = dir.path().join("bk.tar.zst");
    let tarball = dir.path().join("volume.tar.zst");
    for round in 0..rounds {
        let started = Instant::now();
        backup_bytes = download(&daemon, "/v1/boxes/bk/backup", &archive).await?;
        backups.push(started.elapsed());

        let started = Instant::now();
        shell(&format!(
            "tar -cSf - -C {} volume.ext4 | zstd -3 -q -c > {} && sync {}",
            quoted(image.parent().ok_or("no box dir")?),
            quoted(&tarball),
            quoted(&tarball),
        ))?;
        tars.push(started.elapsed());
        tar_bytes = std::fs::metadata(&tarball)?.len();

        let name = format!("bk-{round}");
        let started = Instant::now();
        let restored = upload(
            &daemon,
            &format!("/v1/backups/restore?name={name}"),
            &archive,
        )
        .await?;
        restores.push(started.elapsed());
        let new_id = restored["box"]["id"].as_str().ok_or("no restored id")?;
        let copy = data_dir.join("boxes").join(new_id).join("volume.ext4");
        if round == 0 {
            tokio::task::block_in_place(|| check_same(&image, &copy))?;
        }
        let (status, body) = client
            .call(Method::DELETE, &format!("/v1/boxes/{name}"), json!(null))
            .await?;
        expect(
            status,
            StatusCode::NO_CONTENT,
            "delete the restored box",
            &body,
        )?;

        let out = dir.path().join(format!("untar-{round}"));
        std::fs::create_dir_all(&out)?;
        let started = Instant::now();
        shell(&format!(
            "zstd -d -q -c {} | tar -xSf - -C {} && sync {}/volume.ext4",
            quoted(&tarball),
            quoted(&out),
            quoted(&out),
        ))?;
        untars.push(started.elapsed());
        std::fs::remove_dir_all(&out)?;
    }
    let [backup, tar, restore, untar] = [backups, tars, restores, untars].map(median);
    let mbps = |took: Duration| data_mib * MIB / 1e6 / took.as_secs_f64().max(1e-9);
    println!(
        "backup:  {} ({:.0} MB/s of data), file {:.1} MiB  |  tar -S | zstd -3: {} ({:.0} MB/s), {:.1} MiB  |  time ratio {:.2}, size ratio {:.2}",
        ms(backup),
        mbps(backup),
        backup_bytes as f64 / MIB,
        ms(tar),
        mbps(tar),
        tar_bytes as f64 / MIB,
        ratio(backup, tar),
        backup_bytes as f64 / tar_bytes.max(1) as f64,
    );
    println!(
        "restore: {} ({:.0} MB/s of data, checked, a box made)  |  zstd -d | tar -xS: {} ({:.0} MB/s)  |  time ratio {:.2}",
        ms(restore),
        mbps(restore),
        ms(untar),
        mbps(untar),
        ratio(restore, untar),
    );
    daemon.stop().await
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

fn shell(script: &str) -> BenchResult<()> {
    let status = Command::new("sh").args(["-c", script]).status()?;
    if !status.success() {
        return Err(format!("{script}: {status}").into());
    }
    Ok(())
}

/// A fresh connection's sender for a streamed request.
async fn connect<B>(daemon: &Daemon) -> BenchResult<hyper::client::conn::http1::SendRequest<B>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(daemon.addr).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// GETs `path` into the file `to`, fsync'd; its bytes.
async fn download(daemon: &Daemon, path: &str, to: &PathBuf) -> BenchResult<u64> {
    let mut sender = connect::<http_body_util::Empty<Bytes>>(daemon).await?;
    let request = Request::get(path)
        .header(http::header::HOST, "localhost")
        .header(
            http::header::AUTHORIZATION,
            format!("Bearer {}", daemon.key),
        )
        .body(http_body_util::Empty::new())?;
    let response = sender.send_request(request).await?;
    if response.status() != StatusCode::OK {
        return Err(format!("{path}: {}", response.status()).into());
    }
    let mut body = response.into_body();
    let mut file = tokio::fs::File::create(to).await?;
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
            file.write_all(&data).await?;
        }
    }
    file.sync_all().await?;
    Ok(bytes)
}

/// POSTs the file `from` as `path`'s body, streamed; the JSON answer.
async fn upload(daemon: &Daemon, path: &str, from: &Path) -> BenchResult<serde_json::Value> {
    let file = tokio::fs::File::open(from).await?;
    let len = file.metadata().await?.len();
    let chunks = futures_util::stream::unfold(file, |mut file| async move {
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Frame::data(Bytes::from(buf))), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    })
    .boxed();
    let body = StreamBody::new(chunks);
    let mut sender = connect(daemon).await?;
    let request = Request::post(path)
        .header(http::header::HOST, "localhost")
        .header(
            http::header::AUTHORIZATION,
            format!("Bearer {}", daemon.key),
        )
        .header(http::header::CONTENT_TYPE, "application/zstd")
        .header(http::header::CONTENT_LENGTH, len)
        .body(body)?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let answer = response.into_body().collect().await?.to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&answer)?;
    expect(status, StatusCode::CREATED, "restore", &value)?;
    Ok(value)
}
