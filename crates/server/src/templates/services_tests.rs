//! `[[services]]`: what a valid file gives the guest, and each refusal at its line.

use std::collections::BTreeMap;
use std::path::Path;

use berth_protocol::guest::BoxUser;
use berth_protocol::service::{ReadyCheck, RestartPolicy, ServiceConfig, MAX_SERVICES};

use super::ServiceProblem;
use crate::templates::{parse_template, TemplateError, TemplateErrorKind};

fn parse(text: &str) -> Result<Vec<ServiceConfig>, TemplateError> {
    parse_template(Path::new("/data/templates/t.toml"), text).map(|t| t.services)
}

fn refused(text: &str) -> TemplateError {
    let e = parse(text).expect_err(text);
    eprintln!("{e}");
    e
}

const TWO: &str = r#"name = "t"

[[services]]
name = "db"
command = ["/usr/bin/postgres", "-D", "/home/user/pg"]
user = "root"
env = { PGPORT = "5432" }
cwd = "/home/user"
restart = "always"
ready = { command = ["pg_isready", "-q"] }
keep_awake = true
max_restarts = 0
ready_timeout_s = 120
stop_timeout_s = 30

[[services]]
name = "web"
command = ["/opt/web/serve"]
ready = { port = 8080 }
after = ["db"]
"#;

#[test]
fn two_services_load_as_the_guest_gets_them() {
    let services = parse(TWO).unwrap();
    let db = ServiceConfig {
        name: "db".into(),
        command: vec![
            "/usr/bin/postgres".into(),
            "-D".into(),
            "/home/user/pg".into(),
        ],
        user: BoxUser::Root,
        env: BTreeMap::from([("PGPORT".into(), "5432".into())]),
        cwd: Some("/home/user".into()),
        restart: RestartPolicy::Always,
        ready: Some(ReadyCheck::Command(vec!["pg_isready".into(), "-q".into()])),
        after: Vec::new(),
        keep_awake: true,
        max_restarts: 0,
        ready_timeout_s: 120,
        stop_timeout_s: 30,
    };
    // What a key left out means is the protocol's default, the same on both sides.
    let web: ServiceConfig = serde_json::from_value(serde_json::json!({
        "name": "web", "command": ["/opt/web/serve"], "ready": {"port": 8080}, "after": ["db"]
    }))
    .unwrap();
    assert_eq!(
        (web.user, web.restart, web.keep_awake, web.cwd.as_deref()),
        (BoxUser::User, RestartPolicy::OnFailure, false, None)
    );
    assert_eq!(
        (web.max_restarts, web.ready_timeout_s, web.stop_timeout_s),
        (5, 60, 5)
    );
    assert_eq!(services, [db, web]);
    // As the run dir's services.json carries them.
    let json = serde_json::to_vec(&services).unwrap();
    let back: Vec<ServiceConfig> = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, services);
}

#[test]
fn no_services_is_an_empty_list_and_chains_without_a_loop_load() {
    assert!(parse("name = \"t\"\n").unwrap().is_empty());
    // A diamond: two services wait for `a`, one waits for both; no cycle.
    let diamond = "name = \"t\"\n\
        [[services]]\nname = \"d\"\ncommand = [\"d\"]\nafter = [\"b\", \"c\"]\n\
        [[services]]\nname = \"b\"\ncommand = [\"b\"]\nafter = [\"a\"]\n\
        [[services]]\nname = \"c\"\ncommand = [\"c\"]\nafter = [\"a\"]\n\
        [[services]]\nname = \"a\"\ncommand = [\"a\"]\n";
    let names: Vec<String> = parse(diamond)
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["d", "b", "c", "a"]);
}

/// `name = "t"` then one service per `(name, extra lines)`.
fn file(services: &[(&str, &str)]) -> String {
    let mut text = String::from("name = \"t\"\n");
    for (name, extra) in services {
        text.push_str(&format!(
            "[[services]]\nname = \"{name}\"\ncommand = [\"{name}\"]\n{extra}"
        ));
    }
    text
}

#[test]
fn each_refusal_names_the_service_at_the_offending_line() {
    for (extra, line, want) in [
        // Line 2 is `[[services]]`, 3 `name`, 4 `command`, 5 the first extra line.
        ("restart_policy = \"always\"\n", 5, "restart_policy"),
        (
            "restart = \"sometimes\"\n",
            5,
            "`restart` \"sometimes\" must be \"always\", \"on-failure\" or \"never\"",
        ),
        (
            "ready = { port = 0 }\n",
            5,
            "`ready.port` = 0 is out of range 1..=65535",
        ),
        (
            "ready = { port = 65536 }\n",
            5,
            "`ready.port` = 65536 is out of range 1..=65535",
        ),
        (
            "ready = { command = [] }\n",
            5,
            "`ready.command` must hold a program",
        ),
        (
            "ready = { port = 80, command = [\"x\"] }\n",
            5,
            "exactly one of `port` and `command`",
        ),
        ("ready = {}\n", 5, "exactly one of `port` and `command`"),
        ("ready = { path = \"/health\" }\n", 5, "path"),
        (
            "cwd = \"home/user\"\n",
            5,
            "`cwd` \"home/user\" must be an absolute path",
        ),
        (
            "user = \"admin\"\n",
            5,
            "`user` \"admin\" must be \"user\" or \"root\"",
        ),
        (
            "env = { \"A=B\" = \"x\" }\n",
            5,
            "`env.A=B` is not a variable name",
        ),
        (
            "stop_timeout_s = 0\n",
            5,
            "`stop_timeout_s` = 0 is out of range 1..=60",
        ),
        (
            "stop_timeout_s = 61\n",
            5,
            "`stop_timeout_s` = 61 is out of range 1..=60",
        ),
        (
            "ready_timeout_s = 0\n",
            5,
            "`ready_timeout_s` = 0 is out of range 1..=3600",
        ),
        (
            "max_restarts = 1001\n",
            5,
            "`max_restarts` = 1001 is out of range 0..=1000",
        ),
        ("\nafter = [\"a\"]\n", 6, "`after` names the service itself"),
        (
            "after = [\"nope\"]\n",
            5,
            "`after` names \"nope\", which is not a service",
        ),
    ] {
        let text = file(&[("a", extra)]);
        let e = refused(&text);
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(e.message().contains(want), "{text}: {e}");
        if !matches!(*e.kind, TemplateErrorKind::Syntax(_)) {
            assert!(e.message().starts_with("services[0] \"a\": "), "{e}");
        }
    }
}

#[test]
fn an_empty_command_or_a_bad_name_is_refused_where_it_is_written() {
    let e = refused("name = \"t\"\n[[services]]\nname = \"a\"\ncommand = []\n");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(
        matches!(
            *e.kind,
            TemplateErrorKind::Service {
                problem: ServiceProblem::EmptyCommand { key: "command" },
                ..
            }
        ),
        "{e}"
    );
    let e = refused("name = \"t\"\n[[services]]\ncommand = [\"x\"]\nname = \"Web_1\"\n");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(
        matches!(
            *e.kind,
            TemplateErrorKind::Service {
                problem: ServiceProblem::Name { .. },
                ..
            }
        ),
        "{e}"
    );
    // A service without a command is a missing key, at its table.
    let e = refused("name = \"t\"\n[[services]]\nname = \"a\"\n");
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.message().contains("command"), "{e}");
}

#[test]
fn a_duplicate_name_is_refused_at_the_second() {
    let e = refused(&file(&[("a", ""), ("b", ""), ("a", "")]));
    // The third service's `name` line: 1 + 3 + 3 + 2.
    assert_eq!(e.line, Some(9), "{e}");
    assert!(
        matches!(
            *e.kind,
            TemplateErrorKind::Service {
                index: 2,
                problem: ServiceProblem::DuplicateName,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_cycle_is_reported_with_its_names_at_the_entry_that_closes_it() {
    let e = refused(&file(&[
        ("a", "after = [\"b\"]\n"),
        ("b", "after = [\"a\"]\n"),
    ]));
    // b's `after`: 1 + 4 + 3 + 1.
    assert_eq!(e.line, Some(9), "{e}");
    match &*e.kind {
        TemplateErrorKind::ServiceCycle { cycle } => assert_eq!(cycle, &["a", "b", "a"]),
        other => panic!("{other:?}"),
    }
    assert!(e.message().contains("a → b → a"), "{e}");

    // A longer one, reached from a service that is not in it.
    let e = refused(&file(&[
        ("web", "after = [\"x\"]\n"),
        ("x", "after = [\"y\"]\n"),
        ("y", "after = [\"z\"]\n"),
        ("z", "after = [\"x\"]\n"),
    ]));
    assert_eq!(e.line, Some(17), "{e}");
    assert!(e.message().contains("x → y → z → x"), "{e}");
}

#[test]
fn more_than_the_most_services_is_refused_at_the_first_extra_one() {
    let names: Vec<String> = (0..=MAX_SERVICES).map(|i| format!("s{i}")).collect();
    let services: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
    let e = refused(&file(&services));
    // Each service is 3 lines after the 1 of `name = "t"`.
    assert_eq!(e.line, Some(2 + 3 * MAX_SERVICES), "{e}");
    assert!(
        matches!(
            *e.kind,
            TemplateErrorKind::TooManyServices { max: MAX_SERVICES }
        ),
        "{e}"
    );
    assert!(e.message().contains("at most 32 services"), "{e}");
}
