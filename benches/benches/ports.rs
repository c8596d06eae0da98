//! A box's ports through berth: the same small HTTP server (`port_app.py`, Python's
//! standard library) run in a sandbox box and reached through the daemon's ports proxy,
//! against the very same program run on the host and reached directly on loopback.
//!
//! - request latency: `GET /headers` (a ~400-byte JSON answer) back to back on one
//!   keep-alive connection to the daemon (which reuses its own keep-alive connection to
//!   the app, over the guest channel), p50/p99, as a ratio to the same request on one
//!   keep-alive connection to the host's server, and to the host's server with a new
//!   connection per request (what a proxy without a pool pays);
//! - throughput: `GET /big` of `BERTH_BENCH_PORT_MIB` MiB and `POST /count` of as many,
//!   MiB/s, as a ratio to the same on the host, `BERTH_BENCH_PORT_ROUNDS` times each,
//!   proxied and direct alternating; the median ratio of the rounds.
//!
//! Needs root, runc, python3 and a static berth-init (`make bench` builds it).
//! `BERTH_BENCH_PORT_REQUESTS` (default 300), `BERTH_BENCH_PORT_MIB` (default 256) and
//! `BERTH_BENCH_PORT_ROUNDS` (default 5) set the sizes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_benches::daemon::{count, BenchResult, Daemon};
use berth_benches::http::{expect, Client};
use berth_benches::stats::{ms, ratio, Summary};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::json;

const APP: &str = include_str!("../../crates/server/tests/api/fixtures/port_app.py");
const BOX: &str = "porter";
const PORT: u16 = 8001;
const MIB: usize = 1 << 20;

fn main() {
    berth_benches::daemon::main(run);
}

/// Where requests go: the daemon (with the key, under the port's prefix) or the host's
/// own server.
struct Target {
    addr: SocketAddr,
    prefix: String,
    key: Option<String>,
}

async fn run() -> BenchResult<()> {
    let requests = count("BERTH_BENCH_PORT_REQUESTS", 300);
    let mib = count("BERTH_BENCH_PORT_MIB", 256);
    let rounds = count("BERTH_BENCH_PORT_ROUNDS", 5).max(1);
    let dir = tempfile::tempdir()?;

    // The floor: the same program on the host's loopback.
    let script = dir.path().join("port_app.py");
    std::fs::write(&script, APP)?;
    let host_port = free_port()?;
    let _host_app = KillOnDrop(
        Command::new("python3")
            .arg(&script)
            .arg(host_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let direct = Target {
        addr: SocketAddr::from(([127, 0, 0, 1], host_port)),
        prefix: String::new(),
        key: None,
    };
    wait_listening(direct.addr).await?;

    let daemon = Daemon::start(&dir.path().join("berth")).await?;
    let mut client = Client::connect(daemon.addr, &daemon.key).await?;
    let (status, body) = client
        .call(Method::POST, "/v1/boxes", json!({"name": BOX}))
        .await?;
    expect(status, StatusCode::CREATED, "create", &body)?;
    let upload = Request::builder()
        .method(Method::PUT)
        .uri(format!("/v1/boxes/{BOX}/files?path=/home/user/port_app.py"))
        .header("host", "localhost")
        .header("authorization", format!("Bearer {}", daemon.key))
        .body(Full::new(Bytes::from_static(APP.as_bytes())))?;
    let (status, _) = send(&mut connect(daemon.addr).await?, upload).await?;
    expect(status, StatusCode::NO_CONTENT, "upload", &json!(null))?;
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/boxes/{BOX}/exec"),
            json!({"cmd": ["sh", "-c", format!(
                "setsid python3 /home/user/port_app.py {PORT} >/dev/null 2>&1 </dev/null &"
            )]}),
        )
        .await?;
    expect(status, StatusCode::OK, "start the app", &body)?;
    let proxied = Target {
        addr: daemon.addr,
        prefix: format!("/v1/boxes/{BOX}/ports/{PORT}"),
        key: Some(daemon.key.clone()),
    };

    // Warm both (and wait, through the proxy, for the box's app to listen).
    latency(&proxied, 10).await?;
    latency(&direct, 10).await?;
    let via = Summary::of(&latency(&proxied, requests).await?);
    let floor = Summary::of(&latency(&direct, requests).await?);
    let fresh = Summary::of(&latency_fresh(&direct, requests).await?);
    // Proxied and direct alternate, round by round, so a busy moment of the host slows
    // both alike; each round's ratio is printed, and the median of them.
    let mut down = Vec::new();
    let mut up = Vec::new();
    for _ in 0..rounds {
        down.push((
            download(&proxied, mib).await?,
            download(&direct, mib).await?,
        ));
    }
    for _ in 0..rounds {
        up.push((
            upload_mib_s(&proxied, mib).await?,
            upload_mib_s(&direct, mib).await?,
        ));
    }
    daemon.stop().await?;

    println!(
        "port request (GET /headers through /v1/boxes/{{box}}/ports/{PORT}/, one keep-alive connection): n={} p50 {} p99 {}",
        via.n,
        ms(via.p50),
        ms(via.p99)
    );
    println!(
        "  floor (the same server on the host's loopback, one keep-alive connection): p50 {} p99 {}",
        ms(floor.p50),
        ms(floor.p99)
    );
    println!(
        "  ratio p50 {:.2}×  p99 {:.2}×",
        ratio(via.p50, floor.p50),
        ratio(via.p99, floor.p99)
    );
    println!(
        "  direct with a new connection per request (what a proxy without a pool pays): p50 {} p99 {}; ratio p50 {:.2}×  p99 {:.2}×",
        ms(fresh.p50),
        ms(fresh.p99),
        ratio(via.p50, fresh.p50),
        ratio(via.p99, fresh.p99)
    );
    throughput(&format!("port download (GET /big, {mib} MiB)"), &down);
    throughput(
        &format!("port upload (POST /count, {mib} MiB, chunked)"),
        &up,
    );
    Ok(())
}

/// Prints each round's (proxied, direct) MiB/s and ratio, then the medians.
fn throughput(what: &str, rounds: &[(f64, f64)]) {
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let each: Vec<String> = rounds
        .iter()
        .map(|(via, floor)| format!("{via:.0}/{floor:.0} ({:.2}×)", via / floor))
        .collect();
    println!(
        "{what}: median {:.0} MiB/s; direct {:.0} MiB/s; ratio {:.2}× (rounds, proxied/direct: {})",
        median(rounds.iter().map(|r| r.0).collect()),
        median(rounds.iter().map(|r| r.1).collect()),
        median(rounds.iter().map(|(via, floor)| via / floor).collect()),
        each.join(", ")
    );
}

/// `n` requests of `GET /headers` on one connection, each timed.
async fn latency(target: &Target, n: usize) -> BenchResult<Vec<Duration>> {
    let mut sender = connect(target.addr).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let request = request(target, Method::GET, "/headers", Full::new(Bytes::new()))?;
        let began = Instant::now();
        let (status, _) = send(&mut sender, request).await?;
        samples.push(began.elapsed());
        expect(status, StatusCode::OK, "GET /headers", &json!(null))?;
    }
    Ok(samples)
}

/// `n` requests of `GET /headers`, each on a new connection (connect included), each
/// timed: what the proxy itself does towards the app for every request.
async fn latency_fresh(target: &Target, n: usize) -> BenchResult<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let request = request(target, Method::GET, "/headers", Full::new(Bytes::new()))?;
        let began = Instant::now();
        let (status, _) = send(&mut connect(target.addr).await?, request).await?;
        samples.push(began.elapsed());
        expect(status, StatusCode::OK, "GET /headers", &json!(null))?;
    }
    Ok(samples)
}

/// MiB/s of one `GET /big` of `mib` MiB, counted as it streams.
async fn download(target: &Target, mib: usize) -> BenchResult<f64> {
    let mut sender = connect(target.addr).await?;
    let path = format!("/big?n={}", mib * MIB);
    let request = request(target, Method::GET, &path, Full::new(Bytes::new()))?;
    let began = Instant::now();
    sender.ready().await?;
    let mut body = sender.send_request(request).await?.into_body();
    let mut got = 0usize;
    while let Some(frame) = body.frame().await {
        got += frame?.data_ref().map_or(0, Bytes::len);
    }
    let took = began.elapsed();
    if got != mib * MIB {
        return Err(format!("downloaded {got} bytes of {}", mib * MIB).into());
    }
    Ok(mib as f64 / took.as_secs_f64())
}

/// MiB/s of one chunked `POST /count` of `mib` MiB, until the app's answer.
async fn upload_mib_s(target: &Target, mib: usize) -> BenchResult<f64> {
    let mut sender = connect(target.addr).await?;
    let chunk = Bytes::from(vec![b'y'; MIB]);
    let frames = futures_util::stream::iter(
        (0..mib).map(move |_| Ok::<_, Infallible>(Frame::data(chunk.clone()))),
    );
    let request = request(target, Method::POST, "/count", StreamBody::new(frames))?;
    let began = Instant::now();
    let (status, body) = send(&mut sender, request).await?;
    let took = began.elapsed();
    expect(status, StatusCode::OK, "POST /count", &json!(null))?;
    let counted: serde_json::Value = serde_json::from_slice(&body)?;
    if counted["bytes"] != json!(mib * MIB) {
        return Err(format!("the app counted {counted}").into());
    }
    Ok(mib as f64 / took.as_secs_f64())
}

fn request<B>(target: &Target, method: Method, path: &str, body: B) -> BenchResult<Request<B>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("{}{path}", target.prefix))
        .header("host", "localhost");
    if let Some(key) = &target.key {
        builder = builder.header("authorization", format!("Bearer {key}"));
    }
    Ok(builder.body(body)?)
}

async fn connect<B>(addr: SocketAddr) -> BenchResult<SendRequest<B>>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends one request and reads the whole answer.
async fn send<B>(
    sender: &mut SendRequest<B>,
    request: Request<B>,
) -> BenchResult<(StatusCode, Bytes)>
where
    B: hyper::body::Body + Send + 'static,
{
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    Ok((status, response.into_body().collect().await?.to_bytes()))
}

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits (bounded) until something accepts connections at `addr`.
async fn wait_listening(addr: SocketAddr) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on {addr} after 10 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The host's server, ended with the bench however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
