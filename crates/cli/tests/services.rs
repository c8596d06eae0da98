//! A template's services on real boxes (`[[services]]`, `berth service ls|logs|restart`):
//! started in `after` order, restarted when killed, a failing one ended `failed` with its
//! log tail while the harness still answers, restarted on request, stopped gracefully (their
//! SIGTERM handlers ran, the dependent's first) when the box stops, and listed without
//! waking a stopped box.
//!
//! Real parts: `berth up` on the sandbox runtime (runc, berth-init, the host's `/usr` with
//! its python3) and on qemu (TCG here, busybox's httpd and wget). Needs root; skipped (and
//! says so) otherwise.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{assert_one_line_error, e2e_skip_reason, stderr, stdout, Daemon};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn services(daemon: &Daemon, name: &str) -> Vec<Value> {
    json(&daemon.berth_ok(&["service", "ls", name, "--json"]))["services"]
        .as_array()
        .unwrap()
        .clone()
}

fn service(daemon: &Daemon, name: &str, service: &str) -> Value {
    services(daemon, name)
        .into_iter()
        .find(|s| s["name"] == service)
        .unwrap_or_else(|| panic!("no service {service}"))
}

/// Polls `berth service ls` until `ok` holds for the service, within `within`.
fn wait_service(
    daemon: &Daemon,
    name: &str,
    which: &str,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let info = service(daemon, name, which);
        if ok(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "{which} of {name}: {info:#}\n{}",
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the service's log (its stdout, then its stderr with berth-init's notes)
/// holds `needle`.
fn wait_log(daemon: &Daemon, name: &str, which: &str, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let out = daemon.berth(&["service", "logs", name, which]);
        assert!(out.status.success(), "{}", stderr(&out));
        let log = stdout(&out) + &stderr(&out);
        if log.contains(needle) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "{which}'s log has no {needle:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn state_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["state"] == state
}

fn write_template(daemon: &Daemon, name: &str, text: &str) {
    let dir = daemon.dir().join("templates");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("{name}.toml")), text).unwrap();
    let reloaded = daemon.berth_ok(&["template", "reload"]);
    assert!(!reloaded.contains("error"), "{reloaded}");
}

/// A Python server on port 7001 (the box's own loopback) that listens after half a second
/// and appends `db` to `/memory/stops` when SIGTERM ends it.
const DB: &str = "import signal, socket, sys, time
def term(*_):
    open('/memory/stops', 'a').write('db\\n'); sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(0.5)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 7001)); s.listen()
print('db listening', flush=True)
while True:
    c, _ = s.accept(); c.close()
";

const APP: &str = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 7001))\" && echo app saw db; \
trap 'echo app >> /memory/stops; exit 0' TERM; while :; do sleep 0.1; done";

#[test]
fn sandbox_services_run_in_order_restart_fail_alone_and_stop_gracefully() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let echo_layer = daemon.dir().join("layers/echo");
    let template = format!(
        r#"name = "svc"
base = "host"

[[layers]]
source = "{layer}"
target = "/opt/harness"

[harness]
command = ["/opt/harness/bin/echo-harness"]

[[services]]
name = "app"
command = ["/bin/sh", "-c", '''{app}''']
after = ["db"]

[[services]]
name = "db"
command = ["/usr/bin/python3", "-c", '''{db}''']
ready = {{ port = 7001 }}

[[services]]
name = "broken"
command = ["/bin/sh", "-c", "echo boom >&2; exit 3"]
max_restarts = 1
"#,
        layer = echo_layer.display(),
        app = APP,
        db = DB,
    );
    write_template(&daemon, "svc", &template);
    daemon.berth_ok(&["box", "create", "s1", "--template", "svc"]);

    // Stopped: the template's services, listed without waking the box; what needs the
    // running box refused in one line.
    let listed = services(&daemon, "s1");
    let names: Vec<&str> = listed.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["app", "db", "broken"]);
    assert!(
        listed.iter().all(|s| s["state"] == "stopped"),
        "{listed:#?}"
    );
    let table = daemon.berth_ok(&["service", "ls", "s1"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("READY-AT"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("app") && lines[1].contains("stopped"),
        "{table}"
    );
    let out = daemon.berth(&["service", "logs", "s1", "db"]);
    assert_one_line_error(&out, 1, &["not running", "next start"]);
    let out = daemon.berth(&["service", "restart", "s1", "nope"]);
    assert_one_line_error(&out, 1, &["no service \"nope\"", "berth service ls"]);
    assert_eq!(
        box_state(&daemon, "s1"),
        "stopped",
        "nothing above woke the box"
    );

    daemon.berth_ok(&["box", "start", "s1"]);
    let long = Duration::from_secs(60);
    let db = wait_service(&daemon, "s1", "db", long, state_is("running"));
    let app = wait_service(&daemon, "s1", "app", long, state_is("running"));
    assert!(
        db["ready_at_ms"].as_u64().unwrap() <= app["started_at_ms"].as_u64().unwrap(),
        "app started before db was ready: {db:#} {app:#}"
    );
    wait_log(&daemon, "s1", "app", "app saw db", long);
    // The log's stdout and stderr go to the CLI's own (berth-init's notes are stderr).
    let out = daemon.berth(&["service", "logs", "s1", "db"]);
    assert!(stdout(&out).contains("db listening\n"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("berth-init:"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("berth-init: ready"),
        "{}",
        stderr(&out)
    );

    // Killed from inside the box: restarted by its policy (on-failure).
    let pid = app["pid"].as_u64().unwrap().to_string();
    daemon.berth_ok(&["exec", "s1", "--", "kill", "-9", &pid]);
    let again = wait_service(&daemon, "s1", "app", long, |s| {
        s["state"] == "running" && s["restarts"] == 1
    });
    assert_ne!(again["pid"], app["pid"]);
    assert_eq!(again["last_exit"]["signal"], 9);

    // The failing one ends failed, with its last exit and log tail ...
    let broken = wait_service(&daemon, "s1", "broken", long, state_is("failed"));
    assert_eq!(broken["last_exit"]["code"], 3);
    assert!(broken["log_tail"].as_str().unwrap().contains("boom"));
    let table = daemon.berth_ok(&["service", "ls", "s1"]);
    assert!(table.contains("\nbroken failed: "), "{table}");
    assert!(table.contains("  | boom"), "{table}");
    // ... while the harness still answers.
    let answer = daemon.berth_ok(&["send", "s1", "still there?"]);
    assert!(answer.contains("still there?"), "{answer}");

    // A restart on request: a new life, counted.
    let restarted = json(&daemon.berth_ok(&["service", "restart", "s1", "db", "--json"]));
    assert_eq!(restarted["restarts"], 1);
    let said = daemon.berth_ok(&["service", "restart", "s1", "broken"]);
    assert!(
        said.starts_with("broken: ") && said.contains("restarts"),
        "{said}"
    );
    wait_service(&daemon, "s1", "db", long, |s| {
        s["state"] == "running" && s["restarts"] == 1
    });
    wait_log(&daemon, "s1", "db", "restart asked for", long);

    // The stop ends them gracefully, the dependent first. The db's restart wrote its own
    // `db` line once, so the stop's lines are the last two.
    daemon.berth_ok(&["box", "stop", "s1"]);
    let stops = daemon.berth_ok(&["memory", "s1", "cat", "stops"]);
    let lines: Vec<&str> = stops.lines().collect();
    assert_eq!(lines[lines.len() - 2..], ["app", "db"], "{stops}");
    assert_eq!(lines.iter().filter(|l| **l == "db").count(), 2, "{stops}");
    let listed = services(&daemon, "s1");
    assert!(
        listed.iter().all(|s| s["state"] == "stopped"),
        "{listed:#?}"
    );
    assert_eq!(box_state(&daemon, "s1"), "stopped");

    // Logs of a box that does not run: a clear refusal.
    let out = daemon.berth(&["service", "logs", "s1", "db"]);
    assert!(!out.status.success());
    daemon.berth_ok(&["box", "rm", "s1"]);
}

/// Busybox on the `minimal` image: a web server whose SIGTERM handler writes to `/memory`,
/// and a client that starts once the server's port answers.
const VM_TEMPLATE: &str = r#"name = "svcvm"
base = "minimal"

[[services]]
name = "client"
command = ["/bin/sh", "-c", "wget -q -O - http://127.0.0.1:8080/ && echo; trap 'echo client >> /memory/stops; exit 0' TERM; while :; do sleep 1; done"]
after = ["web"]

[[services]]
name = "web"
command = ["/bin/sh", "-c", "echo served > /tmp/index.html; trap 'echo web >> /memory/stops; kill $child; exit 0' TERM; httpd -f -p 8080 -h /tmp & child=$!; wait"]
ready = { port = 8080 }
"#;

#[test]
fn qemu_services_run_in_order_and_stop_gracefully() {
    let Some(daemon) = Daemon::start_offering_qemu() else {
        return;
    };
    write_template(&daemon, "svcvm", VM_TEMPLATE);
    daemon.berth_ok(&[
        "box",
        "create",
        "v1",
        "--runtime",
        "qemu",
        "--template",
        "svcvm",
    ]);
    daemon.berth_ok(&["box", "start", "v1"]);
    // A TCG guest is slow: generous deadlines (each wait ends as soon as its condition holds).
    let long = Duration::from_secs(180);
    let web = wait_service(&daemon, "v1", "web", long, state_is("running"));
    let client = wait_service(&daemon, "v1", "client", long, state_is("running"));
    assert!(
        web["ready_at_ms"].as_u64().unwrap() <= client["started_at_ms"].as_u64().unwrap(),
        "{web:#} {client:#}"
    );
    wait_log(&daemon, "v1", "client", "served", long);
    daemon.berth_ok(&["box", "stop", "v1"]);
    let stops = daemon.berth_ok(&["memory", "v1", "cat", "stops"]);
    assert_eq!(stops, "client\nweb\n");
    daemon.berth_ok(&["box", "rm", "v1"]);
}

fn box_state(daemon: &Daemon, name: &str) -> String {
    let out = daemon.berth(&["box", "show", name, "--json"]);
    json(&stdout(&out))["state"].as_str().unwrap().to_owned()
}
