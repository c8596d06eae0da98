//! What the egress tests share: a test CA and TLS servers on loopback, the model
//! stand-in, the daemon's config and templates that point at them, and a world of all
//! of these.

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::*;

/// Names the test CA signs and the daemon resolves to the stand-in.
pub const MODEL_HOST: &str = "api.example.test";
/// A second name on the same stand-in, without a credential rule.
pub const PLAIN_HOST: &str = "plain.example.test";
/// Where Claude Code sends its requests; here, to the stand-in too.
pub const ANTHROPIC_HOST: &str = "api.anthropic.com";

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-stub")
}

pub fn skip_reason() -> Option<String> {
    if let Some(reason) = e2e_skip_reason() {
        return Some(reason);
    }
    if !Path::new("/usr/bin/python3").exists() {
        return Some("no /usr/bin/python3 (the model stand-in and the harness)".into());
    }
    None
}

/// A test CA and a server certificate for the three test names, as files.
pub struct TestPki {
    pub dir: tempfile::TempDir,
}

impl TestPki {
    pub fn new() -> TestPki {
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

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// The Messages API stand-in over TLS on loopback; it logs each request's credential
/// headers. Killed on drop.
pub struct ModelStub {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl ModelStub {
    pub fn start(pki: &TestPki) -> ModelStub {
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
    pub fn requests(&self) -> Vec<serde_json::Value> {
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
pub fn host_config(pki: &TestPki, stub: &ModelStub) -> String {
    format!(
        "[egress]\nresolve_overrides = {{ \"{MODEL_HOST}\" = \"127.0.0.1:{port}\", \"{PLAIN_HOST}\" = \"127.0.0.1:{port}\", \"{ANTHROPIC_HOST}\" = \"127.0.0.1:{port}\" }}\nextra_roots = [\"{ca}\"]\n",
        port = stub.port,
        ca = pki.ca().display()
    )
}

/// A template whose harness calls the Messages API at [`MODEL_HOST`] with the key in
/// `ANTHROPIC_API_KEY`, which the credential rule `anthropic` fills in on the way out.
pub fn agent_template() -> String {
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
pub fn secret_value() -> String {
    let mut random = [0u8; 12];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .unwrap();
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("sk-ant-e2e-{hex}")
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
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
pub fn placeholder_in(daemon: &Daemon, name: &str) -> (String, String) {
    let env = daemon.berth_ok(&["exec", name, "--", "env"]);
    let placeholder = env
        .lines()
        .find_map(|l| l.strip_prefix("ANTHROPIC_API_KEY="))
        .expect("the placeholder is in the env")
        .to_owned();
    (env, placeholder)
}

/// Python run in the box as the box user: prints what the stand-in echoed back.
pub fn box_python(daemon: &Daemon, name: &str, script: &str) -> String {
    daemon.berth_ok(&["exec", name, "--", "python3", "-c", script])
}

/// The stand-in, a daemon that resolves the test names to it, `template` loaded, the
/// secret `anthropic` set, and a box `name` of that template (not started).
pub struct World {
    // Dropped in this order: the daemon (and its boxes) before the stand-in and the CA.
    pub daemon: Daemon,
    pub stub: ModelStub,
    pub secret: String,
    pub _pki: TestPki,
}

impl World {
    pub fn new(name: &str, template: &str) -> World {
        World::with_egress_config(name, template, "")
    }

    /// [`World::new`] with more `[egress]` keys in `berth.toml`.
    pub fn with_egress_config(name: &str, template: &str, egress: &str) -> World {
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
