//! Claude Code itself as a harness, behind the gateway.

use std::path::PathBuf;

use super::world::*;

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
