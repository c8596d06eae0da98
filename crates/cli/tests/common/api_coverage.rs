//! Which operations of `openapi.json` a client's suite called, read from the daemon's
//! request log (`request method=GET path="/v1/…"`): an SDK's wrapper test fails when the
//! API has an operation its suite never calls, so a new one cannot ship unwrapped.

use std::collections::BTreeSet;
use std::path::Path;

use super::Daemon;

/// Operations only a browser makes: its Web Push subscription (the push service's endpoint
/// and keys exist only in a browser) and its own cookie session (signed in with a pairing
/// code, not a key). A program's SDK has no business with them.
pub const BROWSER_ONLY: &[(&str, &str)] = &[
    ("GET", "/v1/web/push/key"),
    ("GET", "/v1/web/push/subscriptions"),
    ("POST", "/v1/web/push/subscriptions"),
    ("DELETE", "/v1/web/push/subscriptions/{id}"),
    ("POST", "/v1/web/sessions"),
    ("GET", "/v1/web/session"),
    ("DELETE", "/v1/web/session"),
];

/// `(METHOD, /path/{template})` of every operation in the workspace's `openapi.json`.
pub fn operations() -> BTreeSet<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../openapi.json");
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut ops = BTreeSet::new();
    for (template, methods) in spec["paths"].as_object().unwrap() {
        for method in methods.as_object().unwrap().keys() {
            ops.insert((method.to_ascii_uppercase(), template.clone()));
        }
    }
    ops
}

/// The operation a request was, among `ops`: the template with the most literal segments
/// that matches (`/ports/{port}/links` before `/ports/{port}/{path}`); a last `{path}`
/// takes the rest of the path.
pub fn operation_of<'a>(
    ops: &'a BTreeSet<(String, String)>,
    method: &str,
    path: &str,
) -> Option<&'a (String, String)> {
    let segments: Vec<&str> = path.split('/').collect();
    ops.iter()
        .filter(|(m, _)| m == method)
        .filter(|(_, template)| matches(template, &segments))
        .max_by_key(|(_, template)| template.split('/').filter(|s| !s.starts_with('{')).count())
}

fn matches(template: &str, segments: &[&str]) -> bool {
    let parts: Vec<&str> = template.split('/').collect();
    let rest = parts.last() == Some(&"{path}");
    if rest && segments.len() < parts.len() || !rest && segments.len() != parts.len() {
        return false;
    }
    parts
        .iter()
        .zip(segments)
        .all(|(part, segment)| part.starts_with('{') && !segment.is_empty() || part == segment)
}

/// The operations (besides [`BROWSER_ONLY`]) no request in `log` called.
pub fn uncovered(log: &str) -> Vec<String> {
    let ops = operations();
    let mut left: BTreeSet<&(String, String)> = ops
        .iter()
        .filter(|(m, p)| !BROWSER_ONLY.contains(&(m.as_str(), p.as_str())))
        .collect();
    for line in log.lines() {
        let Some((method, path)) = request_of(line) else {
            continue;
        };
        if let Some(op) = operation_of(&ops, method, path) {
            left.remove(op);
        }
    }
    left.into_iter().map(|(m, p)| format!("{m} {p}")).collect()
}

/// `(method, path)` of a daemon log line `… request method=GET path="/v1/…" status=…`.
fn request_of(line: &str) -> Option<(&str, &str)> {
    let rest = line.split_once(" request method=")?.1;
    let (method, rest) = rest.split_once(' ')?;
    let path = rest.strip_prefix("path=\"")?.split('"').next()?;
    Some((method, path.split('?').next()?))
}

/// After an SDK's suite ran against `daemon`: it called every operation (but the
/// browser's), and deleted every box it made.
pub fn assert_sdk_suite_covered_the_api_and_left_no_box(daemon: &Daemon) {
    let uncovered = uncovered(&std::fs::read_to_string(&daemon.log).unwrap());
    assert!(
        uncovered.is_empty(),
        "openapi.json has operations the suite never calls (wrap them in the SDK and call them in its tests):\n{}",
        uncovered.join("\n")
    );
    let left = daemon.berth_ok(&["box", "ls", "--json"]);
    let left: serde_json::Value = serde_json::from_str(&left).unwrap();
    assert_eq!(left["boxes"].as_array().map(Vec::len), Some(0), "{left}");
}
