//! What a box cannot do through the gateway: hold its resources, or get around it.

use std::fs;
use std::path::{Path, PathBuf};

use super::world::*;

/// What a box does in its own shell to hold connections, go silent and flood the gateway
/// with refusals: prints one JSON object.
const RESOURCE_PROBE: &str = r#"
import json, select, socket, ssl, sys, time
model, plain, refusals = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {}
if refusals:
    # Refusals, each a line of the audit log, in order.
    for i in range(refusals):
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(("CONNECT deny-%d.example.test:443 HTTP/1.1\r\nHost: x\r\n\r\n" % i).encode())
        s.recv(256)
        s.close()
    print(json.dumps(out))
    sys.exit(0)
# Five connections to a pinned name, no ClientHello yet: the gateway holds four and
# closes one at once (which one depends on arrival order).
held = [socket.create_connection((model, 443), timeout=30) for _ in range(5)]
start = time.monotonic()
readable, _, _ = select.select(held, [], [], 8)
out["closed_at_once"] = sum(1 for s in readable if s.recv(1) == b"")
out["closed_after_s"] = round(time.monotonic() - start, 2)
for s in held:
    s.close()
# A spliced TLS connection that goes silent: the gateway closes it when idle.
ctx = ssl._create_unverified_context()
# The gateway frees the slots of the five just closed as it notices them (at once on an
# idle host, later on a loaded one): until then a new connection is the fifth, refused.
deadline = time.monotonic() + 30
while True:
    try:
        tls = ctx.wrap_socket(socket.create_connection((plain, 443), timeout=60), server_hostname=plain)
        break
    except (ssl.SSLError, OSError):
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
start = time.monotonic()
try:
    got = tls.recv(1)
except (ssl.SSLError, OSError) as e:
    got = b""
out["idle_closed"] = got == b""
out["idle_after_s"] = round(time.monotonic() - start, 2)
print(json.dumps(out))
"#;

/// The gateway's per-box bounds on a real daemon and a real box: a connection cap, idle
/// relays closed, and an audit log that rotates and is still read in order.
#[test]
fn a_box_cannot_hold_the_gateways_resources_and_its_log_rotates() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let egress = "max_connections_per_box = 4\nidle_timeout_secs = 2\naudit_max_file_bytes = 4096\naudit_max_files = 3\n";
    let world = World::with_egress_config("bounded", &agent_template(), egress);
    let daemon = &world.daemon;
    let probe = |refusals: usize| {
        let printed = daemon.berth_ok(&[
            "exec",
            "bounded",
            "--timeout",
            "120",
            "--",
            "python3",
            "-c",
            RESOURCE_PROBE,
            MODEL_HOST,
            PLAIN_HOST,
            &refusals.to_string(),
        ]);
        serde_json::from_str::<serde_json::Value>(printed.trim()).unwrap()
    };
    let records = |audit: &str| -> Vec<serde_json::Value> {
        audit
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };

    let out = probe(0);
    assert_eq!(out["closed_at_once"], 1, "{out}");
    assert!(out["closed_after_s"].as_f64().unwrap() < 8.0, "{out}");
    assert_eq!(out["idle_closed"], true, "{out}");
    let idle_after = out["idle_after_s"].as_f64().unwrap();
    assert!((1.9..30.0).contains(&idle_after), "{out}");
    let audit = daemon.berth_ok(&["egress", "bounded", "--json"]);
    let before = records(&audit);
    assert!(
        before.iter().any(|r| r["reason"] == "too_many_connections"),
        "{audit}"
    );
    assert!(
        before.iter().any(|r| r["decision"] == "allow"
            && r["closed"] == "idle"
            && r["target"] == PLAIN_HOST),
        "{audit}"
    );

    // The log rotates: 60 refusals of ~250 bytes do not fit in 3 files of 4 KiB. What is
    // left reads back in order, the newest last, through the API and the CLI.
    let refusals = 60;
    probe(refusals);
    let audit = daemon.berth_ok(&["egress", "bounded", "--json"]);
    let after = records(&audit);
    let denied: Vec<u64> = after
        .iter()
        .filter_map(|r| {
            r["target"]
                .as_str()?
                .strip_prefix("deny-")?
                .strip_suffix(".example.test")?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        denied.len() < refusals && !denied.is_empty(),
        "nothing rotated away: {}",
        denied.len()
    );
    assert!(denied.windows(2).all(|w| w[1] == w[0] + 1), "{denied:?}");
    assert_eq!(*denied.last().unwrap(), refusals as u64 - 1);
    assert!(
        !after.iter().any(|r| r["reason"] == "too_many_connections"),
        "the oldest records rotated away first"
    );

    let dir = daemon.dir().join("audit");
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&dir), 0o700);
    let files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
        assert!(fs::metadata(f).unwrap().len() <= 4096, "{}", f.display());
    }
}

/// Each way out past the gateway, tried from inside a box: refused (or, for the spellings
/// and the fragmented ClientHello, working as the canonical name), and each refusal is in
/// the audit log with its reason. Names that resolve to private addresses are refused in
/// `crates/egress/tests/gateway.rs` (a daemon's only way to point a name at loopback is a
/// resolve override, which bypasses the check by design).
#[test]
fn bypass_attempts_are_refused_and_logged() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let world = World::new("probe", &agent_template());
    let (daemon, secret) = (&world.daemon, world.secret.as_str());
    let printed = daemon.berth_ok(&[
        "exec",
        "probe",
        "--timeout",
        "120",
        "--",
        "python3",
        "/opt/model-stub/bypass_probe.py",
        MODEL_HOST,
        PLAIN_HOST,
    ]);
    let results: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
    let result = |name: &str| results[name].as_str().unwrap_or_default().to_owned();
    let refused_by_gateway = [
        "not_allowed",
        "connect_port_22",
        "connect_port_80",
        "ip_literal",
        "loopback_literal",
        "localhost",
        "upper_trailing_dot_denied",
    ];
    for name in refused_by_gateway {
        assert_eq!(result(name), "HTTP 403", "{name}: {results}");
    }
    for name in ["port_80", "port_22"] {
        assert_eq!(
            result(name),
            "refused",
            "{name}: nothing listens: {results}"
        );
    }
    for name in ["sni_mismatch", "no_sni", "garbage"] {
        assert!(result(name).starts_with("closed"), "{name}: {results}");
    }
    assert!(result("host_mismatch").starts_with("HTTP 421"), "{results}");
    for name in ["upper_trailing_dot_allowed", "tiny_writes"] {
        let answer = result(name);
        assert!(answer.starts_with("HTTP 200"), "{name}: {results}");
        // The stand-in echoes what it got; the box reads it scrubbed.
        assert!(
            answer.contains("berth-ph-") && !answer.contains(secret),
            "{name}: the echo comes back with the placeholder: {answer}"
        );
    }
    // The rule applied to both: the stand-in got the real key.
    for path in ["/probe", "/tiny"] {
        assert!(
            world
                .stub
                .requests()
                .iter()
                .any(|r| r["path"] == path && r["x-api-key"] == secret),
            "{path}: the rule applies: {:?}",
            world.stub.requests()
        );
    }

    let audit = daemon.berth_ok(&["egress", "probe", "--json"]);
    let denies: Vec<(String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["decision"] == "deny")
        .map(|r| {
            (
                r["target"].as_str().unwrap_or("-").to_owned(),
                r["reason"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let denied =
        |target: &str, reason: &str| denies.iter().any(|(t, r)| t == target && r == reason);
    let expected = [
        ("evil.example.test", "not_allowed"),
        (MODEL_HOST, "port"),
        ("93.184.216.34", "ip_literal"),
        ("127.0.0.1", "ip_literal"),
        ("evil.example.test", "not_allowed"),
        (PLAIN_HOST, "sni_mismatch"),
        (MODEL_HOST, "host_mismatch"),
    ];
    for (target, reason) in expected {
        assert!(
            denied(target, reason),
            "no deny {reason} for {target}: {denies:?}"
        );
    }
    for reason in ["bad_host", "no_sni", "bad_client_hello"] {
        assert!(
            denies.iter().any(|(_, r)| r == reason),
            "no deny {reason}: {denies:?}"
        );
    }
}

/// Run as box root: opens connections to 127.0.0.1:443 and counts berth-init's Unix streams
/// to the gateway (a copying berth-init holds one per connection, a handing one none); then
/// does what box root can try with the egress socket berth-init uses (box root's): hands
/// over a socket of its own as berth-init does, keeping a duplicate (with which it could
/// later clear `O_NONBLOCK` or take the bytes the host was woken for, and block a host
/// thread in `splice`). Prints one JSON object.
const HANDOFF_PROBE: &str = r#"
import json, socket, sys, time
egress_socket, model = sys.argv[1], sys.argv[2]
def unix_streams():
    with open("/proc/net/unix") as f:
        return sum(1 for line in f.readlines()[1:] if line.split()[5] == "03")
before = unix_streams()
held = [socket.create_connection((model, 443), timeout=30) for _ in range(4)]
deadline = time.monotonic() + 20
while unix_streams() > before and time.monotonic() < deadline:
    time.sleep(0.05)
out = {"streams_per_connection": (unix_streams() - before) / len(held)}
for s in held:
    s.close()

listener = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(listener.getsockname())
kept, _ = listener.accept()
client.sendall(b"\x16\x03\x01\x00\x05hello")
gateway = socket.socket(socket.AF_UNIX)
gateway.connect(egress_socket)
socket.send_fds(gateway, [b"\x00"], [kept.fileno()])
gateway.settimeout(30)
try:
    out["gateway_closed"] = gateway.recv(1) == b""
except ConnectionResetError:
    out["gateway_closed"] = True
kept.settimeout(5)
out["unread"] = kept.recv(64).decode("latin-1")
print(json.dumps(out))
"#;

/// In a sandbox berth-init hands each connection's socket to the gateway and keeps no
/// stream for it; and only the box's init may: box root's handoff is closed unread and
/// audited `handoff_refused` (the gateway's side: `crates/egress/tests/gateway/handoff.rs`).
#[test]
fn berth_init_hands_connections_over_and_box_root_cannot() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let world = World::new("handoff", &agent_template());
    let daemon = &world.daemon;
    let socket = format!(
        "{}/{}",
        berth_protocol::guest::SANDBOX_RUN_DIR,
        berth_protocol::guest::EGRESS_SOCKET
    );
    let printed = daemon.berth_ok(&[
        "exec",
        "handoff",
        "--user",
        "root",
        "--timeout",
        "90",
        "--",
        "python3",
        "-c",
        HANDOFF_PROBE,
        &socket,
        MODEL_HOST,
    ]);
    let out: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(out["streams_per_connection"], 0.0, "{out}");
    assert_eq!(out["gateway_closed"], true, "{out}");
    assert_eq!(out["unread"], "\u{16}\u{3}\u{1}\u{0}\u{5}hello", "{out}");
    let audit = daemon.berth_ok(&["egress", "handoff", "--json"]);
    let refused = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["decision"] == "deny" && r["reason"] == "handoff_refused")
        .count();
    assert_eq!(refused, 1, "{audit}");
}
