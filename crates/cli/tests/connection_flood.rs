//! One client cannot take every connection of a real daemon (`berth up`, its own process
//! with the default `[server]` settings), issue 20 §2. Each attacker and each probe comes
//! from its own loopback address, as different clients would:
//!
//! - tenant A (127.0.0.2) opens 1100 `GET …/processes/{id}/output` at once, with its key, of
//!   a background process that runs and prints nothing (so each stays open), and retries
//!   each refused one after its `Retry-After` (plus a spread, as client libraries jitter:
//!   a burst of a thousand connections at the same instant is a matter of rate, not of
//!   who holds the connections, which is what this test is about);
//! - clients without a key (127.0.0.2) open 1100 connections that send their headers a byte
//!   at a time, and reconnect when cut, or after the same pause when refused;
//!
//! while tenant B's `GET /v1/boxes` (127.0.0.3) and `/v1/health` (127.0.0.4) are measured on
//! fresh connections, first with the daemon at rest and then during the flood: every one
//! must be answered (before the fix none was, for as long as the flood lasted). Their
//! latencies are printed, not bounded: the flood's clients share the machine's cores with
//! the daemon, and on a loaded CI machine the tail is the scheduler's, not berth's.
//! The daemon's open descriptors and RSS stay bounded during the flood and come back after.
//!
//! And an upgrade keeps what berth.toml says: the stream budget's old name still sets it.

mod common;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{e2e_skip_reason, reset_peak_rss, vm_kib, Daemon};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;

const TENANT_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const TENANT_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const HEALTH: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);
/// The attack of the issue: more than `[server] max_connections` (1024).
const FLOOD: usize = 1100;
/// `[server] max_connections` and `max_streams_per_tenant`, the defaults.
const MAX_CONNECTIONS: usize = 1024;
const MAX_STREAMS: usize = 128;
/// Calls measured per probe, at rest and during the flood.
const PROBES: usize = 100;
/// A probe unanswered this long is a failure (before the fix, they waited for ever; a
/// loaded 2-core machine has been seen answering in 2.6 s at p99, so this is no latency
/// bound, only "answered at all").
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
const MIB: u64 = 1024 * 1024;
/// How far the daemon's peak RSS may pass its resting RSS during a flood: each admitted
/// connection holds hyper's buffers (up to about 32 KiB while its request is read, less
/// while it waits), each stream a guest connection's; 1024 of them is 32 MiB, doubled
/// for the allocator's arenas.
const RSS_GROWTH_BOUND: u64 = 64 * MIB;
/// What the allocator may keep of the flood's memory once it is over.
const RSS_KEPT_AFTER: u64 = 32 * MIB;

#[test]
fn one_tenants_flood_of_output_streams_leaves_the_others_served() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let flooded = Flooded::start();
    let daemon = &flooded.daemon;
    let key_a = key_in(&daemon.berth_ok(&["tenant", "create", "a"]));
    let key_b = key_in(&daemon.berth_ok(&["tenant", "create", "b"]));
    let runtime = flooded.runtime();
    runtime.block_on(async {
        let addr = flooded.addr;
        let (status, _) = call(
            TENANT_A,
            addr,
            "POST",
            "/v1/boxes",
            Some(&key_a),
            r#"{"name":"flood"}"#,
        )
        .await;
        assert_eq!(status, 201);
        let (status, started) = call(
            TENANT_A,
            addr,
            "POST",
            "/v1/boxes/flood/exec",
            Some(&key_a),
            r#"{"cmd":["sleep","100000"],"background":true}"#,
        )
        .await;
        assert_eq!(status, 201, "{started}");
        let started: serde_json::Value = serde_json::from_str(&started).unwrap();
        let output = format!(
            "/v1/boxes/flood/processes/{}/output",
            started["id"].as_str().unwrap()
        );
        let request = format!(
            "GET {output} HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer {key_a}\r\n\r\n"
        );
        let attack = move |conn, counts| output_stream(conn, request.clone(), counts);
        flooded
            .measure(&key_b, attack, |counts| {
                counts.streams.load(Ordering::Relaxed) >= 100
            })
            .await;
    });
    let counts = flooded.counts.clone();
    let streams = counts.streams_peak.load(Ordering::Relaxed);
    eprintln!(
        "tenant A: {streams} streams open at most; {} refusals with Retry-After",
        counts.refused.load(Ordering::Relaxed)
    );
    assert!(
        streams <= MAX_STREAMS,
        "tenant A held {streams} streams at once, over the budget of {MAX_STREAMS}"
    );
    assert!(
        counts.refused.load(Ordering::Relaxed) > 0,
        "nothing was refused"
    );
}

#[test]
fn slow_clients_without_a_key_from_one_address_leave_health_answering() {
    let flooded = Flooded::start();
    let runtime = flooded.runtime();
    let key = flooded.daemon.api_endpoint().1;
    runtime.block_on(async {
        // Under way once each slow client has connected at least once.
        flooded.measure(&key, slow_headers, |_| true).await;
    });
    let refused = flooded.counts.refused.load(Ordering::Relaxed);
    eprintln!("slow clients: {refused} connections refused at once");
    assert!(refused > 0, "no slow client was refused");
}

#[test]
fn the_stream_budgets_old_key_still_sets_it_with_a_warning() {
    let daemon = Daemon::start_with_config("[server]\nmax_event_streams_per_tenant = 1\n");
    let logs = daemon.logs();
    assert!(
        logs.contains("max_event_streams_per_tenant = 1 is the old name of max_streams_per_tenant"),
        "no warning about the old key:\n{logs}"
    );
    daemon.berth_ok(&["box", "create", "watched"]);
    let (addr, key) = daemon.api_endpoint();
    let addr: SocketAddr = addr.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let request = format!(
            "GET /v1/boxes/watched/events HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer {key}\r\n\r\n"
        );
        let mut first = connect_from(TENANT_B, addr).await.unwrap();
        first.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut first).await.expect("an answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        // The budget is one stream: the second is refused.
        let (status, body) = call(TENANT_B, addr, "GET", "/v1/boxes/watched/events", Some(&key), "").await;
        assert_eq!(status, 429, "{body}");
        assert!(body.contains("streams open"), "{body}");
    });
}

/// A daemon at rest, ready to be flooded.
struct Flooded {
    daemon: Daemon,
    addr: SocketAddr,
    pid: u32,
    counts: Arc<Counts>,
}

/// What the attacking clients have seen.
#[derive(Default)]
struct Counts {
    /// Clients that connected (and sent what they send) at least once.
    started: AtomicUsize,
    /// Streams open now, and the most at once.
    streams: AtomicUsize,
    streams_peak: AtomicUsize,
    /// Answers `429` with `Retry-After`.
    refused: AtomicUsize,
}

impl Flooded {
    fn start() -> Flooded {
        raise_fd_limit();
        let daemon = Daemon::start();
        let (addr, _) = daemon.api_endpoint();
        let addr: SocketAddr = addr.parse().unwrap();
        let pid = daemon.child.id();
        Flooded {
            daemon,
            addr,
            pid,
            counts: Arc::default(),
        }
    }

    fn runtime(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Measures B's calls and health at rest, starts [`FLOOD`] attacking clients, waits until
    /// each has started and `biting` holds, measures again, stops the flood, and checks the
    /// latencies and what the daemon held.
    async fn measure<F, Fut>(&self, key_b: &str, attempt: F, biting: impl Fn(&Counts) -> bool)
    where
        F: Fn(TcpStream, Arc<Counts>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let addr = self.addr;
        let resting = probes(addr, key_b).await;
        let resting_fds = fd_count(self.pid);
        let resting_rss = vm_kib(self.pid, "VmRSS") * 1024;
        eprintln!(
            "at rest: {resting}; daemon {resting_fds} fds, RSS {} MiB",
            resting_rss / MIB
        );
        reset_peak_rss(self.pid);

        let (stop, stopping) = watch::channel(false);
        let attackers: Vec<_> = (0..FLOOD)
            .map(|client| {
                tokio::spawn(attacker(
                    addr,
                    retry_after(client),
                    stopping.clone(),
                    self.counts.clone(),
                    attempt.clone(),
                ))
            })
            .collect();
        let sampler = tokio::spawn(sample_fds(self.pid, stopping.clone()));
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.counts.started.load(Ordering::Relaxed) < FLOOD || !biting(&self.counts) {
            assert!(
                Instant::now() < deadline,
                "the flood did not get under way in 120 s: {} of {FLOOD} clients started, {} streams",
                self.counts.started.load(Ordering::Relaxed),
                self.counts.streams.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let flooded = probes(addr, key_b).await;
        let _ = stop.send(true);
        for attacker in attackers {
            attacker.abort();
        }
        let peak_fds = sampler.await.unwrap();
        let peak_rss = vm_kib(self.pid, "VmHWM") * 1024;
        eprintln!(
            "during the flood: {flooded}; daemon at most {peak_fds} fds, peak RSS {} MiB",
            peak_rss / MIB
        );

        // Every attacking connection is closed now: the daemon lets go of them.
        let deadline = Instant::now() + Duration::from_secs(60);
        let after_fds = loop {
            let fds = fd_count(self.pid);
            if fds <= resting_fds + 16 || Instant::now() > deadline {
                break fds;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let after_rss = vm_kib(self.pid, "VmRSS") * 1024;
        eprintln!(
            "after the flood: daemon {after_fds} fds, RSS {} MiB",
            after_rss / MIB
        );

        for (what, rest, during) in [
            ("tenant B's GET /v1/boxes", &resting.boxes, &flooded.boxes),
            ("/v1/health", &resting.health, &flooded.health),
        ] {
            assert!(
                during.unanswered == 0,
                "{what} during the flood: {during} (at rest: {rest})"
            );
        }
        assert!(
            peak_fds <= resting_fds + MAX_CONNECTIONS + 2 * MAX_STREAMS,
            "the daemon held {peak_fds} descriptors during the flood (at rest {resting_fds})"
        );
        assert!(
            peak_rss <= resting_rss + RSS_GROWTH_BOUND,
            "the daemon's RSS peaked at {} MiB during the flood, over {} MiB + {} MiB",
            peak_rss / MIB,
            resting_rss / MIB,
            RSS_GROWTH_BOUND / MIB
        );
        assert!(
            after_rss <= resting_rss + RSS_KEPT_AFTER,
            "the daemon's RSS was {} MiB after the flood, over {} MiB + {} MiB",
            after_rss / MIB,
            resting_rss / MIB,
            RSS_KEPT_AFTER / MIB
        );
        assert!(
            after_fds <= resting_fds + 16,
            "the daemon still held {after_fds} descriptors a minute after the flood (at rest {resting_fds})"
        );
    }
}

/// How long attacking client number `client` waits after a refusal: the `Retry-After` of
/// 1 s, and a spread of up to another second across clients.
fn retry_after(client: usize) -> Duration {
    Duration::from_secs(1) + Duration::from_millis((client % 1000) as u64)
}

/// One attacking client: connects from tenant A's address, and makes `attempt` on the
/// connection, again and again until `stop`; after an attempt that says so (a refusal),
/// it waits `pause` first.
async fn attacker<F, Fut>(
    addr: SocketAddr,
    pause: Duration,
    mut stop: watch::Receiver<bool>,
    counts: Arc<Counts>,
    attempt: F,
) where
    F: Fn(TcpStream, Arc<Counts>) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut first = true;
    loop {
        let round = async {
            let conn = connect_from(TENANT_A, addr).await;
            if std::mem::take(&mut first) {
                counts.started.fetch_add(1, Ordering::Relaxed);
            }
            match conn {
                Ok(conn) => attempt(conn, counts.clone()).await,
                Err(_) => true,
            }
        };
        let refused = tokio::select! {
            refused = round => refused,
            _ = stop.wait_for(|s| *s) => return,
        };
        if refused {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

/// Tenant A's attempt: asks for the output stream and holds it while it is served; `true`
/// (wait before the next) unless it was served.
async fn output_stream(mut conn: TcpStream, request: String, counts: Arc<Counts>) -> bool {
    if conn.write_all(request.as_bytes()).await.is_err() {
        return true;
    }
    let Some(head) = read_head(&mut conn).await else {
        return true;
    };
    if !head.starts_with("HTTP/1.1 200") {
        if head.starts_with("HTTP/1.1 429") && head.contains("retry-after: ") {
            counts.refused.fetch_add(1, Ordering::Relaxed);
        }
        return true;
    }
    let open = counts.streams.fetch_add(1, Ordering::Relaxed) + 1;
    counts.streams_peak.fetch_max(open, Ordering::Relaxed);
    let mut buf = [0u8; 4096];
    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
    counts.streams.fetch_sub(1, Ordering::Relaxed);
    false
}

/// A slow client without a key: sends a request's headers a byte every 300 ms, never
/// finishing, until cut or refused; `true` (wait before the next) when refused.
async fn slow_headers(conn: TcpStream, counts: Arc<Counts>) -> bool {
    let (mut read, mut write) = conn.into_split();
    let dribble = async {
        let head = b"GET /v1/health HTTP/1.1\r\nHost: berth\r\nX-Slow: ";
        for byte in head.iter().chain(std::iter::repeat(&b'a')) {
            if write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let mut answer = Vec::new();
    let answered = async {
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = read.read(&mut buf).await {
            answer.extend_from_slice(&buf[..n]);
        }
    };
    tokio::select! {
        () = dribble => {}
        () = answered => {}
    }
    let refused = answer.starts_with(b"HTTP/1.1 429");
    if refused {
        counts.refused.fetch_add(1, Ordering::Relaxed);
    }
    refused
}

/// Latencies of one kind of call.
#[derive(Default)]
struct Latencies {
    taken: Vec<Duration>,
    unanswered: usize,
}

impl Latencies {
    fn p99(&self) -> Duration {
        let mut sorted = self.taken.clone();
        sorted.sort();
        let at = (sorted.len() * 99).div_ceil(100).saturating_sub(1);
        sorted.get(at).copied().unwrap_or(PROBE_TIMEOUT)
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sorted = self.taken.clone();
        sorted.sort();
        let p50 = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        write!(f, "p50 {p50:?} p99 {:?} of {}", self.p99(), sorted.len())?;
        if self.unanswered > 0 {
            write!(f, ", {} unanswered in {PROBE_TIMEOUT:?}", self.unanswered)?;
        }
        Ok(())
    }
}

struct Probes {
    boxes: Latencies,
    health: Latencies,
}

impl std::fmt::Display for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "B's GET /v1/boxes {}; /v1/health {}",
            self.boxes, self.health
        )
    }
}

/// [`PROBES`] calls each of B's `GET /v1/boxes` and `/v1/health`, alternating, each on a
/// fresh connection; stops at the first unanswered one.
async fn probes(addr: SocketAddr, key_b: &str) -> Probes {
    let mut probes = Probes {
        boxes: Latencies::default(),
        health: Latencies::default(),
    };
    'probing: for _ in 0..PROBES {
        for (from, path, key, into) in [
            (TENANT_B, "/v1/boxes", Some(key_b), &mut probes.boxes),
            (HEALTH, "/v1/health", None, &mut probes.health),
        ] {
            let began = Instant::now();
            let answered =
                tokio::time::timeout(PROBE_TIMEOUT, call(from, addr, "GET", path, key, "")).await;
            match answered {
                Ok((200, _)) => into.taken.push(began.elapsed()),
                Ok((status, body)) => panic!("{path}: {status} {body}"),
                Err(_) => {
                    into.unanswered += 1;
                    break 'probing;
                }
            }
        }
    }
    probes
}

/// One call on a fresh connection from `from`: the status and the body.
async fn call(
    from: Ipv4Addr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut conn = connect_from(from, addr).await.unwrap();
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: berth\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The head of an answer, lowercased past the status line; `None` if the connection ended.
async fn read_head(conn: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let (status, rest) = head.split_once("\r\n").unwrap_or((&head, ""));
    Some(format!("{status}\r\n{}", rest.to_lowercase()))
}

async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from.into(), 0))?;
    socket.connect(to).await
}

/// The most descriptors the daemon held, sampled every 20 ms until `stopping`.
async fn sample_fds(pid: u32, mut stopping: watch::Receiver<bool>) -> usize {
    let mut peak = 0;
    loop {
        peak = peak.max(fd_count(pid));
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = stopping.wait_for(|s| *s) => return peak.max(fd_count(pid)),
        }
    }
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// This test holds thousands of sockets: its soft descriptor limit goes up to the hard one
/// (the daemon, its child, inherits it).
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The `berth_…` key in a command's output.
fn key_in(out: &str) -> String {
    out.split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .unwrap_or_else(|| panic!("no key in {out:?}"))
        .to_owned()
}
