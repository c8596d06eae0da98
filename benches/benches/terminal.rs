//! Terminal keystroke echo: one byte typed into a terminal until its echo comes back.
//! - berth: a WebSocket to `GET /v1/boxes/{name}/pty?cmd=cat` on a sandbox box (daemon in
//!   this process; the byte goes client → daemon → berth-init → the box's PTY, whose line
//!   discipline echoes it, and back);
//! - floor: the same on a PTY of this host, with the same `cat` on it.
//!
//! Printed as p50/p99 and the ratio to the floor. Needs root, runc and a static berth-init
//! (`make bench` builds it). `BERTH_BENCH_KEYS` (default 500) sets the keystrokes.

use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::Client;
use berth_benches::stats::{ms, ratio, Summary};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{Method, StatusCode};
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::Message;

const BOX: &str = "typist";

fn main() {
    berth_benches::daemon::main(run);
}

async fn run() -> BenchResult<()> {
    let keys = count("BERTH_BENCH_KEYS", 500);
    let floor = local_echo(keys)?;

    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(&dir.path().join("berth")).await?;
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;
    let (status, body) = client
        .call(Method::POST, "/v1/boxes", json!({"name": BOX}))
        .await?;
    if status != StatusCode::CREATED {
        return Err(format!("create: {status} {body}").into());
    }
    let mut request =
        format!("ws://{}/v1/boxes/{BOX}/pty?cmd=cat", daemon.addr).into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {}", daemon.key).parse()?);
    let tcp = tokio::net::TcpStream::connect(daemon.addr).await?;
    tcp.set_nodelay(true)?;
    let (mut socket, _) = tokio_tungstenite::client_async(request, tcp).await?;
    // The first message names the terminal; then cat is running.
    socket.next().await.ok_or("no hello")??;
    let mut berth = Vec::with_capacity(keys);
    for n in 0..=keys {
        let key = b'a' + (n % 26) as u8;
        let started = Instant::now();
        socket.send(Message::Binary(vec![key].into())).await?;
        loop {
            match socket.next().await.ok_or("the terminal closed")?? {
                Message::Binary(bytes) if bytes.contains(&key) => break,
                _ => {}
            }
        }
        // The first keystroke warms the path; it is not counted.
        if n > 0 {
            berth.push(started.elapsed());
        }
    }
    drop(socket);
    daemon.stop().await?;

    let b = Summary::of(&berth);
    let f = Summary::of(&floor);
    println!(
        "terminal keystroke echo (WebSocket → daemon → berth-init → the box's PTY and back): n={} p50 {} p99 {}",
        b.n,
        ms(b.p50),
        ms(b.p99)
    );
    println!(
        "  floor (a PTY on this host, the same cat): p50 {} p99 {}",
        ms(f.p50),
        ms(f.p99)
    );
    println!(
        "  ratio p50 {:.1}×  p99 {:.1}×",
        ratio(b.p50, f.p50),
        ratio(b.p99, f.p99)
    );
    Ok(())
}

/// Keystroke echo on a PTY of this host with `cat` on its slave side.
fn local_echo(keys: usize) -> BenchResult<Vec<Duration>> {
    let pty = nix::pty::openpty(None, None)?;
    let slave = |fd: &OwnedFd| -> BenchResult<std::process::Stdio> { Ok(fd.try_clone()?.into()) };
    let mut cat = std::process::Command::new("cat")
        .stdin(slave(&pty.slave)?)
        .stdout(slave(&pty.slave)?)
        .stderr(slave(&pty.slave)?)
        .spawn()?;
    drop(pty.slave);
    // SAFETY: a new fd duplicated from the master, owned by the File from here on.
    let mut master = unsafe { std::fs::File::from_raw_fd(libc::dup(pty.master.as_raw_fd())) };
    let mut samples = Vec::with_capacity(keys);
    let mut buf = [0u8; 256];
    for n in 0..=keys {
        let key = b'a' + (n % 26) as u8;
        let started = Instant::now();
        master.write_all(&[key])?;
        loop {
            let got = master.read(&mut buf)?;
            if buf[..got].contains(&key) {
                break;
            }
        }
        if n > 0 {
            samples.push(started.elapsed());
        }
    }
    cat.kill()?;
    cat.wait()?;
    Ok(samples)
}
