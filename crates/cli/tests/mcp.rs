//! berth's MCP server against the official MCP Python SDK (pinned, unmodified): a real
//! `berth up`, two tenants, and `tests/mcp/session.py` driving the same session over stdio
//! (the SDK spawns `berth mcp`) and over Streamable HTTP (the daemon's `/mcp`): tools listed,
//! a box made, exec, a file written and read, a message answered by the `echo` template's
//! agent, its memory read and searched, and the other tenant's box out of reach. Then no box
//! is left but the ones the session made, and those are removed.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{e2e_skip_reason, run_logged, Daemon};

/// What the session may take on a loaded machine.
const SESSION_DEADLINE: Duration = Duration::from_secs(600);

/// What the script prints, in order: one `ok` line per check.
const CHECKS: &[&str] = &[
    "stdio: tools listed with their schemas",
    "stdio: box created and listed",
    "stdio: exec answers the exit code and output, cut to size",
    "stdio: a file written, read whole and in part, listed",
    "stdio: the agent answered the message, and its events read back",
    "stdio: the agent's memory listed and read",
    "stdio: the agent's memory searched",
    "stdio: a port's URL",
    "stdio: another tenant's box and bad arguments are tool errors",
    "http: tools listed with their schemas",
    "http: box created and listed",
    "http: exec answers the exit code and output, cut to size",
    "http: a file written, read whole and in part, listed",
    "http: the agent answered the message, and its events read back",
    "http: the agent's memory listed and read",
    "http: the agent's memory searched",
    "http: a port's URL",
    "http: another tenant's box and bad arguments are tool errors",
    "http: the initialize handshake works too",
    "http: no key or a wrong key is 401, an oversized body 413",
];

#[test]
fn the_official_mcp_client_drives_berth_over_stdio_and_http() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return;
    }
    let python = match berth_testkit::mcp_sdk::find() {
        Ok(python) => python,
        Err(reason) => {
            berth_testkit::skip("mcp-sdk", reason);
            return;
        }
    };
    let daemon = Daemon::start();
    let (addr, _admin) = daemon.api_endpoint();
    let key = tenant_key(&daemon, "acme");
    let other_key = tenant_key(&daemon, "other");
    as_tenant(&daemon, &other_key, &["box", "create", "theirs"]);

    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/session.py");
    let log = daemon.dir().join("mcp-session.out");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", daemon.dir())
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("BERTH_BIN", env!("CARGO_BIN_EXE_berth"))
        .env("BERTH_URL", format!("http://{addr}"))
        .env("BERTH_API_KEY", &key)
        .env("OTHER_BOX", "theirs");
    let (status, output) = run_logged(&mut cmd, "mcp session", &log, SESSION_DEADLINE);
    let passed: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert!(
        status.is_some_and(|s| s.success()) && passed == CHECKS,
        "the MCP session ({status:?}) failed:\n{output}\n{}",
        daemon.logs()
    );

    // The session made exactly its two boxes; the other tenant's is untouched.
    assert_eq!(box_names(&daemon, &key), ["mcp-http", "mcp-stdio"]);
    assert_eq!(box_names(&daemon, &other_key), ["theirs"]);
    for name in ["mcp-http", "mcp-stdio"] {
        as_tenant(&daemon, &key, &["box", "rm", name]);
    }
    as_tenant(&daemon, &other_key, &["box", "rm", "theirs"]);
    assert!(box_names(&daemon, &key).is_empty());
    assert!(box_names(&daemon, &other_key).is_empty());
}

/// A new tenant's API key.
fn tenant_key(daemon: &Daemon, name: &str) -> String {
    let created = daemon.berth_ok(&["tenant", "create", name, "--json"]);
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    created["api_key"].as_str().unwrap().to_owned()
}

fn as_tenant(daemon: &Daemon, key: &str, args: &[&str]) -> String {
    let out = daemon.berth_with(args, None, &[("BERTH_API_KEY", key)]);
    assert!(
        out.status.success(),
        "berth {args:?} failed: {}\n{}",
        common::stderr(&out),
        daemon.logs()
    );
    common::stdout(&out)
}

/// The names of the boxes `key` sees, sorted.
fn box_names(daemon: &Daemon, key: &str) -> Vec<String> {
    let listed = as_tenant(daemon, key, &["box", "ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let mut names: Vec<String> = listed["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}
