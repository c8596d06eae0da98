//! Egress end to end: a real daemon, real boxes, and real TLS servers on loopback (with a
//! test CA the daemon trusts through `extra_roots`) behind `resolve_overrides`.
//!
//! Needs root, runc, berth-init and python3 (the model stand-in and the box's harness are
//! Python); otherwise each test skips (`berth_testkit::skip`).

mod common;

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

/// Names the test CA signs and the daemon resolves to the stand-in.
const MODEL_HOST: &str = "api.example.test";
/// A second name on the same stand-in, without a credential rule.
const PLAIN_HOST: &str = "plain.example.test";
/// Where Claude Code sends its requests; here, to the stand-in too.
const ANTHROPIC_HOST: &str = "api.anthropic.com";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-stub")
}

fn skip_reason() -> Option<String> {
    if let Some(reason) = e2e_skip_reason() {
        return Some(reason);
    }
    if !Path::new("/usr/bin/python3").exists() {
        return Some("no /usr/bin/python3 (the model stand-in and the harness)".into());
    }
    None
}

/// A test CA and a server certificate for the three test names, as files.
struct TestPki {
    dir: tempfile::TempDir,
}

impl TestPki {
    fn new() -> TestPki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "berth test CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![
            MODEL_HOST.to_owned(),
            PLAIN_HOST.to_owned(),
            ANTHROPIC_HOST.to_owned(),
        ])
        .unwrap();
        let cert = params.signed_by(&key, &*ca).unwrap();
        fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        TestPki { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// The Messages API stand-in over TLS on loopback; it logs each request's credential
/// headers. Killed on drop.
struct ModelStub {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl ModelStub {
    fn start(pki: &TestPki) -> ModelStub {
        let port = closed_port();
        let log = pki.dir.path().join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(fixtures().join("model_stub.py"))
            .arg(port.to_string())
            .arg("--tls")
            .arg(pki.dir.path().join("server.pem"))
            .arg(pki.dir.path().join("server.key"))
            .env("MODEL_STUB_LOG", &log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready", "the model stand-in did not start");
        ModelStub { child, port, log }
    }

    /// Every request it received: `{method, path, host, x-api-key, authorization, …}`.
    fn requests(&self) -> Vec<serde_json::Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for ModelStub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `berth.toml`: the test names resolve to the stand-in, whose CA the gateway trusts.
fn host_config(pki: &TestPki, stub: &ModelStub) -> String {
    format!(
        "[egress]\nresolve_overrides = {{ \"{MODEL_HOST}\" = \"127.0.0.1:{port}\", \"{PLAIN_HOST}\" = \"127.0.0.1:{port}\", \"{ANTHROPIC_HOST}\" = \"127.0.0.1:{port}\" }}\nextra_roots = [\"{ca}\"]\n",
        port = stub.port,
        ca = pki.ca().display()
    )
}

/// A template whose harness calls the Messages API at [`MODEL_HOST`] with the key in
/// `ANTHROPIC_API_KEY`, which the credential rule `anthropic` fills in on the way out.
fn agent_template() -> String {
    format!(
        r#"name = "agent"
base = "host"

[[layers]]
source = "{fixtures}"
target = "/opt/model-stub"

[harness]
command = ["python3", "/opt/model-stub/messages_harness.py"]
ack = "replay"
env = {{ MODEL_HOST = "{MODEL_HOST}" }}

[egress]
allow = ["{MODEL_HOST}", "{PLAIN_HOST}"]

[[egress.credentials]]
name = "anthropic"
hosts = ["{MODEL_HOST}"]
header = "x-api-key"
placeholder_env = "ANTHROPIC_API_KEY"
"#,
        fixtures = fixtures().display()
    )
}

/// A value nobody else would write, to look for.
fn secret_value() -> String {
    let mut random = [0u8; 12];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .unwrap();
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("sk-ant-e2e-{hex}")
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                if let Ok(bytes) = fs::read(&path) {
                    if bytes.windows(needle.len()).any(|w| w == needle) {
                        found.push(path);
                    }
                }
            }
        }
    }
    found
}

/// The environment of an exec in box `name`, and the placeholder in it.
fn placeholder_in(daemon: &Daemon, name: &str) -> (String, String) {
    let env = daemon.berth_ok(&["exec", name, "--", "env"]);
    let placeholder = env
        .lines()
        .find_map(|l| l.strip_prefix("ANTHROPIC_API_KEY="))
        .expect("the placeholder is in the env")
        .to_owned();
    (env, placeholder)
}

/// Python run in the box as the box user: prints what the stand-in echoed back.
fn box_python(daemon: &Daemon, name: &str, script: &str) -> String {
    daemon.berth_ok(&["exec", name, "--", "python3", "-c", script])
}

/// The stand-in, a daemon that resolves the test names to it, `template` loaded, the
/// secret `anthropic` set, and a box `name` of that template (not started).
struct World {
    // Dropped in this order: the daemon (and its boxes) before the stand-in and the CA.
    daemon: Daemon,
    stub: ModelStub,
    secret: String,
    _pki: TestPki,
}

impl World {
    fn new(name: &str, template: &str) -> World {
        World::with_egress_config(name, template, "")
    }

    /// [`World::new`] with more `[egress]` keys in `berth.toml`.
    fn with_egress_config(name: &str, template: &str, egress: &str) -> World {
        let pki = TestPki::new();
        let stub = ModelStub::start(&pki);
        let daemon = Daemon::start_with_config(&format!("{}{egress}", host_config(&pki, &stub)));
        let name_line = template.lines().next().unwrap_or_default();
        let template_name = name_line
            .strip_prefix("name = \"")
            .and_then(|rest| rest.strip_suffix('"'))
            .expect("a template starts with its name");
        fs::create_dir_all(daemon.dir().join("templates")).unwrap();
        fs::write(
            daemon.dir().join(format!("templates/{template_name}.toml")),
            template,
        )
        .unwrap();
        daemon.berth_ok(&["template", "reload"]);
        let secret = secret_value();
        let out = daemon.berth_with(
            &["secret", "set", "anthropic"],
            Some(format!("{secret}\n").as_bytes()),
            &[],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        daemon.berth_ok(&["box", "create", name, "--template", template_name]);
        World {
            daemon,
            stub,
            secret,
            _pki: pki,
        }
    }
}

#[test]
fn a_harness_reaches_the_model_with_the_real_key_and_the_box_holds_only_a_placeholder() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let mut world = World::new("agent1", &agent_template());
    let secret = world.secret.clone();
    let (daemon, stub) = (&world.daemon, &world.stub);

    // The harness's call goes out through HTTPS_PROXY (CONNECT on 3128) and is intercepted.
    let answer = daemon.berth_ok(&["send", "agent1", "hello gateway"]);
    assert!(
        answer.contains("stub model heard: hello gateway"),
        "{answer}\n{}",
        daemon.logs()
    );
    let requests = stub.requests();
    let call = requests.last().expect("the stand-in got the call");
    assert_eq!(call["path"], "/v1/messages");
    assert_eq!(call["x-api-key"], secret, "the stand-in got the real key");

    // The box has only the placeholder: in the env of exec and of every process…
    let (env, placeholder) = placeholder_in(daemon, "agent1");
    assert!(placeholder.starts_with("berth-ph-"), "{placeholder}");
    assert!(!env.contains(&secret));
    let environs = daemon.berth_ok(&[
        "exec",
        "agent1",
        "--user",
        "root",
        "--",
        "sh",
        "-c",
        // What box root cannot read (berth-init, non-dumpable; a child of it between fork
        // and exec) no one in the box can: skipped, so the loop's status is not the last
        // file's.
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done; true",
    ]);
    assert!(
        environs.contains(&format!("ANTHROPIC_API_KEY={placeholder}")),
        "the harness's environ holds the placeholder: {environs}"
    );
    assert!(
        !environs.contains(&secret),
        "a process in the box holds the secret"
    );
    // …and in no file the box can see (its volume, its run dir, /etc, /tmp, …): grep
    // exits 1 when nothing matches.
    let grep = daemon.berth(&[
        "exec", "agent1", "--user", "root", "--", "grep", "-rlF", &secret, "/home", "/memory",
        "/tmp", "/run", "/var", "/etc", "/root", "/dev/shm", "/opt",
    ]);
    assert_eq!(
        grep.status.code(),
        Some(1),
        "files in the box hold the secret: {}",
        stdout(&grep)
    );

    // Pinned 443 (no proxy): /etc/hosts sends the name to berth-init's listener; the box
    // trusts its CA through SSL_CERT_FILE, and the placeholder is swapped on the way.
    let direct = box_python(
        daemon,
        "agent1",
        &format!(
            "import os, urllib.request as u\n\
             o = u.build_opener(u.ProxyHandler({{}}))\n\
             r = u.Request('https://{MODEL_HOST}/whoami', headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
             print(o.open(r, timeout=20).read().decode())"
        ),
    );
    let seen: serde_json::Value = serde_json::from_str(direct.trim()).unwrap();
    assert_eq!(seen["path"], "/whoami");
    // The stand-in got the real key and echoes the request as it arrived; the gateway
    // scrubs the answer on its way back, so the box reads its own placeholder there.
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
    assert_eq!(seen["x-api-key"], placeholder.as_str(), "{direct}");
    assert!(
        !direct.contains(&secret),
        "the echo laundered the secret: {direct}"
    );

    // The placeholder sent to a host without the rule reaches it unchanged, never the
    // secret (the stream is spliced, not intercepted: the box sees the stand-in's own
    // certificate, which it does not trust, hence no verification in this probe).
    let plain = box_python(
        daemon,
        "agent1",
        &format!(
            "import os, ssl, urllib.request as u\n\
             r = u.Request('https://{PLAIN_HOST}/echo', headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
             print(u.urlopen(r, timeout=20, context=ssl._create_unverified_context()).read().decode())"
        ),
    );
    let seen: serde_json::Value = serde_json::from_str(plain.trim()).unwrap();
    assert_eq!(seen["x-api-key"], placeholder.as_str());

    // Every decision is in the audit log, with the credential rule named for the swap.
    let audit = daemon.berth_ok(&["egress", "agent1", "--json"]);
    let records: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed = |via: &str, target: &str| {
        records
            .iter()
            .any(|r| r["decision"] == "allow" && r["via"] == via && r["target"] == target)
    };
    assert!(allowed("connect", MODEL_HOST), "{audit}");
    assert!(allowed("direct", MODEL_HOST), "{audit}");
    assert!(allowed("connect", PLAIN_HOST), "{audit}");
    assert!(
        records
            .iter()
            .any(|r| r["credential"] == "anthropic" && r["intercept"] == true),
        "{audit}"
    );
    assert!(!audit.contains(&secret) && !audit.contains(&placeholder));

    // Nothing on the host's disk holds the secret in the clear: not the database (it is
    // sealed), not the box's files, not the saved CA state, not the daemon's log.
    let leaks = files_containing(daemon.dir(), secret.as_bytes());
    assert!(leaks.is_empty(), "the secret is in the clear in {leaks:?}");

    // A daemon that crashed reattaches the running box with the same CA and placeholder
    // (the box trusts and holds them): the harness's next call still gets the real key.
    let requests_before = stub.requests().len();
    world.daemon.crash_and_restart();
    let (daemon, stub) = (&world.daemon, &world.stub);
    let answer = daemon.berth_ok(&["send", "agent1", "after a crash"]);
    assert!(
        answer.contains("stub model heard: after a crash"),
        "{answer}\n{}",
        daemon.logs()
    );
    assert_eq!(stub.requests().len(), requests_before + 1);
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
    let env = daemon.berth_ok(&["exec", "agent1", "--", "env"]);
    assert!(
        env.contains(&format!("ANTHROPIC_API_KEY={placeholder}\n")),
        "the box was restarted instead of reattached: {env}"
    );

    // A new boot rotates the placeholder; the old one is worthless.
    daemon.berth_ok(&["box", "stop", "agent1"]);
    let env = daemon.berth_ok(&["exec", "agent1", "--", "env"]);
    assert!(
        !env.contains(&placeholder),
        "the placeholder did not rotate"
    );
    let answer = daemon.berth_ok(&["send", "agent1", "again"]);
    assert!(answer.contains("stub model heard: again"), "{answer}");
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
}

/// A rule restricted to `POST /v1/messages`: the harness's calls get the real key; a GET
/// to the same host, and a POST to a path that only looks like it is under the prefix,
/// carry the placeholder upstream and are audited as withheld.
#[test]
fn a_rule_restricted_to_post_v1_messages_injects_nowhere_else() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let template = agent_template().replace(
        "placeholder_env = \"ANTHROPIC_API_KEY\"\n",
        "placeholder_env = \"ANTHROPIC_API_KEY\"\nmethods = [\"POST\"]\npaths = [\"/v1/messages\"]\n",
    );
    assert!(template.contains("methods"), "{template}");
    let world = World::new("scoped", &template);
    let (daemon, stub, secret) = (&world.daemon, &world.stub, &world.secret);

    let answer = daemon.berth_ok(&["send", "scoped", "hello scoped"]);
    assert!(
        answer.contains("stub model heard: hello scoped"),
        "{answer}"
    );
    assert_eq!(
        stub.requests().last().unwrap()["x-api-key"],
        secret.as_str()
    );

    let probe = |method: &str, path: &str| {
        box_python(
            daemon,
            "scoped",
            &format!(
                "import os, urllib.request as u\n\
                 o = u.build_opener(u.ProxyHandler({{}}))\n\
                 r = u.Request('https://{MODEL_HOST}{path}', method='{method}', data=b'{{}}' if '{method}' == 'POST' else None, headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
                 print(o.open(r, timeout=20).read().decode())"
            ),
        )
    };
    let (_, placeholder) = placeholder_in(daemon, "scoped");
    for (method, path) in [
        ("GET", "/v1/messages"),
        ("POST", "/v1/messages/%2e%2e/admin"),
    ] {
        let out = probe(method, path);
        assert!(!out.contains(secret.as_str()), "{out}");
        let last = stub.requests().last().unwrap().clone();
        assert_eq!(last["method"], method, "{last}");
        assert_eq!(
            last["x-api-key"],
            placeholder.as_str(),
            "{method} {path}: the secret went up"
        );
    }
    let audit = daemon.berth_ok(&["egress", "scoped", "--json"]);
    let records: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for reason in ["method", "path_ambiguous"] {
        assert!(
            records
                .iter()
                .any(|r| r["withheld"]["rule"] == "anthropic" && r["withheld"]["reason"] == reason),
            "no withheld {reason} in {audit}"
        );
    }
    assert!(
        records.iter().any(|r| r["credential"] == "anthropic"),
        "{audit}"
    );
    let table = daemon.berth_ok(&["egress", "scoped"]);
    assert!(table.contains("withheld anthropic: method"), "{table}");
}

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

/// Where Claude Code is installed for [`claude_code_is_a_harness_behind_the_gateway`]
/// (`make test` installs it when npm is there).
fn claude_code_dir() -> PathBuf {
    std::env::var_os("BERTH_CLAUDE_CODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/srv/berth/claude-code"))
}

/// Claude Code itself, unmodified, as a box's harness, talking to "api.anthropic.com"
/// through the gateway: the name is pinned to the box's loopback, Claude Code trusts the
/// box's CA through `NODE_EXTRA_CA_CERTS`, and the gateway swaps the placeholder in
/// `ANTHROPIC_API_KEY` for the real key on the way to the stand-in. berth knows Claude Code
/// received each message from its replay (`--replay-user-messages`), and after the box is
/// stopped `--continue` sends the earlier turns again.
/// Needs `npm install --prefix /srv/berth/claude-code @anthropic-ai/claude-code` (or
/// `$BERTH_CLAUDE_CODE_DIR`).
#[test]
fn claude_code_is_a_harness_behind_the_gateway() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let claude_dir = claude_code_dir();
    if !claude_dir.join("node_modules/.bin/claude").exists() {
        berth_testkit::skip(
            "claude-code",
            format!(
                "no Claude Code in {} (npm install --prefix {} @anthropic-ai/claude-code)",
                claude_dir.display(),
                claude_dir.display()
            ),
        );
        return;
    }
    let template = format!(
        r#"name = "claude"
base = "host"
stop_after_s = 600

[[layers]]
source = "{claude}"
target = "/opt/claude-code"

[harness]
command = ["/opt/claude-code/node_modules/.bin/claude", "-p", "--input-format", "stream-json",
           "--output-format", "stream-json", "--verbose", "--replay-user-messages"]
resume_args = ["--continue"]
ack = "replay"
env = {{ CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1" }}

[egress]
allow = ["{ANTHROPIC_HOST}"]

[[egress.credentials]]
name = "anthropic"
hosts = ["{ANTHROPIC_HOST}"]
header = "x-api-key"
placeholder_env = "ANTHROPIC_API_KEY"
"#,
        claude = claude_dir.display(),
    );
    let world = World::new("cc", &template);
    let (daemon, stub, secret) = (&world.daemon, &world.stub, world.secret.as_str());

    let first = daemon.berth_ok(&["send", "cc", "remember 42"]);
    assert!(
        first.contains("stub model heard: remember 42"),
        "{first}\n{}",
        daemon.logs()
    );
    let calls: Vec<_> = stub
        .requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap_or("").starts_with("/v1/messages"))
        .collect();
    assert!(!calls.is_empty());
    for call in &calls {
        assert_eq!(call["host"], ANTHROPIC_HOST);
        assert_eq!(
            call["x-api-key"], secret,
            "every model call carries the real key"
        );
    }

    daemon.berth_ok(&["box", "stop", "cc"]);
    let second = daemon.berth_ok(&["send", "cc", "what did I say?"]);
    assert!(
        second.contains("remember 42") && second.contains("what did I say?"),
        "the resumed session must send the earlier turn: {second}"
    );
    let events = daemon.berth_ok(&["logs", "cc", "--json"]);
    let replays = events
        .lines()
        .filter(|l| l.contains("\"type\":\"user\"") && l.contains("isReplay"))
        .count();
    assert!(
        replays >= 2,
        "each message replayed by Claude Code: {events}"
    );
    let leaks = files_containing(daemon.dir(), secret.as_bytes());
    assert!(leaks.is_empty(), "the secret is in the clear in {leaks:?}");
}
