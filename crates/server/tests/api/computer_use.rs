//! The computer-use API (`/v1/boxes/{ref}/desktop…`) against the fake runtime, whose agent
//! runs the template's services (ready at its boot) and answers `xdotool` and `scrot` like
//! a desktop would (`fake_agent::desktop`): a box without a desktop is a 409 that wakes
//! nothing, a refused request a 400 that wakes nothing, and on a desktop box each call
//! wakes it, runs its programs on `:0`, and answers what they printed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::fake_agent::FAKE_PNG;
use crate::harness::{error_code, TestServer};

/// A template with the desktop's three services, as the built-in `desktop` declares them.
const DESK: &str = r#"name = "desk"
base = "host"

[[services]]
name = "xvfb"
command = ["Xvfb", ":0"]

[[services]]
name = "xfce"
command = ["startxfce4"]
after = ["xvfb"]

[[services]]
name = "vnc"
command = ["berth-vnc"]
after = ["xvfb"]
"#;

/// A template with a service, but no X server.
const PLAIN: &str = r#"name = "plain"
base = "host"

[[services]]
name = "web"
command = ["web"]
"#;

/// A daemon with both templates, a box `d1` of `desk` and `p1` of `plain` (both stopped).
async fn with_boxes() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("templates")).unwrap();
    std::fs::write(data.path().join("templates/desk.toml"), DESK).unwrap();
    std::fs::write(data.path().join("templates/plain.toml"), PLAIN).unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let server = TestServer::start(fake.clone(), None, data).await;
    for (name, template) in [("d1", "desk"), ("p1", "plain")] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/boxes",
                Some(json!({"name": name, "template": template})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    (server, fake)
}

async fn actions(server: &TestServer, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::POST, "/v1/boxes/d1/desktop/actions", Some(body))
        .await
}

#[tokio::test]
async fn a_box_without_a_desktop_is_a_conflict_and_nothing_wakes() {
    let (server, fake) = with_boxes().await;
    let calls = [
        (Method::GET, "/v1/boxes/p1/desktop", None),
        (Method::GET, "/v1/boxes/p1/desktop/screenshot", None),
        (Method::GET, "/v1/boxes/p1/desktop/cursor", None),
        (
            Method::POST,
            "/v1/boxes/p1/desktop/actions",
            Some(json!({"actions": [{"type": "click"}]})),
        ),
    ];
    for (method, path, body) in calls {
        let (status, answer) = server.call(method, path, body).await;
        assert_eq!(
            (status, error_code(&answer)),
            (StatusCode::CONFLICT, "conflict"),
            "{path}: {answer}"
        );
        assert_eq!(
            answer["error"]["message"],
            "box p1 has no desktop (template plain has no xvfb service); use --template desktop"
        );
    }
    let (status, _) = server
        .call(Method::GET, "/v1/boxes/nope/desktop", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0, "nothing was woken");
}

#[tokio::test]
async fn a_refused_request_is_a_400_that_names_the_action_and_wakes_nothing() {
    let (server, fake) = with_boxes().await;
    let too_many: Vec<Value> = (0..101).map(|_| json!({"type": "wait", "ms": 1})).collect();
    let (status, body) = actions(&server, json!({ "actions": too_many })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["error"]["message"],
        "101 actions: at most 100 go in one request"
    );
    let refused = [
        (
            json!({"type": "move", "x": 40_000, "y": 1}),
            "invalid actions[1] (move): x is 40000: coordinates are 0 to 32767",
        ),
        (
            json!({"type": "key", "keys": "ctrl+$(reboot)"}),
            "invalid actions[1] (key): keys \"ctrl+$(reboot)\" holds '$'",
        ),
        (
            json!({"type": "key", "keys": "a exec"}),
            "invalid actions[1] (key): \"exec\" is not a key (it is an xdotool command)",
        ),
        (
            json!({"type": "wait", "ms": 60_001}),
            "invalid actions[1] (wait): ms is 60001: at most 60000",
        ),
        (
            json!({"type": "click", "x": 5}),
            "invalid actions[1] (click): give x and y together, or neither",
        ),
    ];
    for (action, message) in refused {
        let (status, body) = actions(
            &server,
            json!({"actions": [{"type": "move", "x": 1, "y": 1}, action]}),
        )
        .await;
        assert_eq!(
            (status, error_code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{body}"
        );
        let said = body["error"]["message"].as_str().unwrap();
        assert!(said.starts_with(message), "{said}");
        assert_eq!(body["error"]["details"]["index"], 1, "{body}");
    }
    // Unknown fields, in the body or in an action, and unknown types.
    for body in [
        json!({"actions": [], "speed": 2}),
        json!({"actions": [{"type": "move", "x": 1, "y": 1, "z": 0}]}),
        json!({"actions": [{"type": "teleport"}]}),
    ] {
        let (status, answer) = actions(&server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(error_code(&answer), "invalid_request");
    }
    let (status, body) = server
        .call(
            Method::GET,
            "/v1/boxes/d1/desktop/screenshot?pointer=1",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0, "nothing was woken");
    let (_, d1) = server.call(Method::GET, "/v1/boxes/d1", None).await;
    assert_eq!(d1["state"], "stopped");
}

#[tokio::test]
async fn a_desktop_box_wakes_and_answers_what_its_programs_print() {
    let (server, fake) = with_boxes().await;
    let (status, desktop) = server.call(Method::GET, "/v1/boxes/d1/desktop", None).await;
    assert_eq!(status, StatusCode::OK, "{desktop}");
    assert_eq!(
        fake.starts.load(Ordering::SeqCst),
        1,
        "the call woke the box"
    );
    assert_eq!(
        (
            &desktop["display"],
            &desktop["width"],
            &desktop["height"],
            &desktop["ready"]
        ),
        (&json!(":0"), &json!(1024), &json!(768), &json!(true))
    );
    // The fake's services were ready as it booted: within the boot's time.
    let after = desktop["ready_after_ms"].as_u64().expect("a number");
    assert!(after < 60_000, "{desktop}");

    let key = server.key.clone();
    let (status, headers, png) = server
        .raw(
            Method::GET,
            "/v1/boxes/d1/desktop/screenshot?cursor=true",
            Some(&key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "image/png");
    assert_eq!(&png[..], FAKE_PNG, "the bytes as scrot wrote them");

    let (status, done) = actions(
        &server,
        json!({"actions": [
            {"type": "click", "x": 10, "y": 20},
            {"type": "wait", "ms": 10},
            {"type": "type", "text": "hi"},
            {"type": "key", "keys": "ctrl+s enter"},
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done, json!({"cursor": {"x": 7, "y": 9}}));
    let (status, cursor) = server
        .call(Method::GET, "/v1/boxes/d1/desktop/cursor", None)
        .await;
    assert_eq!((status, cursor), (StatusCode::OK, json!({"x": 7, "y": 9})));

    let mut runs: Vec<String> = fake
        .harness
        .desktop_runs
        .lock()
        .unwrap()
        .iter()
        .map(|argv| argv.join(" "))
        .collect();
    // The screenshot's file, of a random name in /tmp, is gone once read.
    let shot = runs[1].strip_prefix("scrot -o -p ").unwrap().to_owned();
    assert!(
        shot.starts_with("/tmp/berth-shot-") && shot.ends_with(".png"),
        "{shot}"
    );
    let (status, _) = server
        .call(
            Method::GET,
            &format!("/v1/boxes/d1/files?path={shot}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{shot} was removed");
    runs[1] = "scrot -o -p FILE".into();
    assert_eq!(
        runs,
        [
            "xdotool getdisplaygeometry",
            "scrot -o -p FILE",
            "xdotool mousemove 10 20 click --repeat 1 1",
            "xdotool type --delay 12 -- hi",
            "xdotool key -- ctrl+s Return",
            "xdotool getmouselocation --shell",
            "xdotool getmouselocation --shell",
        ]
    );
    assert_eq!(
        fake.starts.load(Ordering::SeqCst),
        1,
        "one boot for them all"
    );
}

#[tokio::test]
async fn a_failed_step_says_which_and_what_xdotool_said_and_stops_there() {
    let (server, fake) = with_boxes().await;
    let (status, body) = actions(
        &server,
        json!({"actions": [
            {"type": "move", "x": 1, "y": 2},
            {"type": "type", "text": "fail-me"},
            {"type": "move", "x": 3, "y": 4},
        ]}),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::CONFLICT, "conflict"),
        "{body}"
    );
    assert_eq!(
        body["error"]["message"],
        "actions[1] (type) failed in box d1: exit code 1: xdo: cannot type"
    );
    assert_eq!(
        body["error"]["details"],
        json!({"index": 1, "type": "type", "exit_code": 1, "timed_out": false,
            "stderr": "xdo: cannot type\n"})
    );
    let runs = fake.harness.desktop_runs.lock().unwrap().len();
    assert_eq!(runs, 2, "the action after the failed one never ran");

    // A key name xdotool does not know is the caller's, though xdotool exits 0.
    let (status, body) = actions(
        &server,
        json!({"actions": [{"type": "key", "keys": "ctrl+Nope"}, {"type": "key", "keys": "Nope"}]}),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
    let said = body["error"]["message"].as_str().unwrap();
    assert!(
        said.starts_with("actions[1] (key) in box d1: xdotool knows no such key: (symbol) No such key name 'Nope'. Ignoring it.;"),
        "{said}"
    );
    assert_eq!(
        body["error"]["details"],
        json!({"index": 1, "type": "key",
            "stderr": "(symbol) No such key name 'Nope'. Ignoring it."})
    );
}
