//! The daemon an SDK's suite (`sdk_python`, `sdk_typescript`) runs against: besides the
//! builtin templates, its data dir holds `svc`, a template with a service, which the suites'
//! service tests make their boxes of.

use super::Daemon;

/// `svc`: the `host` template and one service that says hello, then sleeps.
pub const SERVICE_TEMPLATE: &str = r#"name = "svc"
base = "host"

[[services]]
name = "hello"
command = ["sh", "-c", "echo hello; exec sleep 1000"]
"#;

/// A daemon for an SDK suite, with `config` as its `berth.toml` when given. The suite's
/// templates are in place before it starts, so every listing shows them, reloaded or not.
pub fn daemon(config: Option<&str>) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("templates")).unwrap();
    std::fs::write(dir.path().join("templates/svc.toml"), SERVICE_TEMPLATE).unwrap();
    Daemon::start_in(dir, config, &[])
}
