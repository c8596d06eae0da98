//! `berth pair` and `berth session ls|revoke` against a real `berth up`: the printed link's
//! code signs a browser in (traded over HTTP, as the web app does), the QR code is printed,
//! and a revoked session's cookie stops working. No box is started.

mod common;

use common::{assert_one_line_error, raw_request, stdout, Daemon};

/// One HTTP/1.1 request: the status, the `Set-Cookie` header if any, and the body.
fn http(
    daemon: &Daemon,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Option<String>, String) {
    let (authority, _) = daemon.api_endpoint();
    let answer = raw_request(&authority, method, path, headers, body);
    let set_cookie = answer
        .header_values("set-cookie")
        .first()
        .map(|v| v.to_string());
    (answer.status, set_cookie, answer.body)
}

#[test]
fn a_printed_link_signs_a_browser_in_and_its_session_is_listed_and_revoked() {
    let daemon = Daemon::start();
    let (authority, _) = daemon.api_endpoint();
    let printed = daemon.berth_ok(&["pair"]);

    // The QR block: lines of half blocks (a pipe gets them without colours).
    let qr_lines = printed
        .lines()
        .filter(|l| l.chars().any(|c| matches!(c, '█' | '▀' | '▄')))
        .count();
    assert!(qr_lines >= 10, "no QR code in:\n{printed}");
    assert!(!printed.contains('\x1b'), "colours in a pipe:\n{printed}");
    assert!(printed.contains("until "), "no expiry in:\n{printed}");

    let prefix = format!("http://{authority}/#/pair/");
    let link = printed
        .split_whitespace()
        .find(|w| w.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no link {prefix}… in:\n{printed}"));
    let code = &link[prefix.len()..];

    let (status, set_cookie, body) = http(
        &daemon,
        "POST",
        "/v1/web/sessions",
        &[("Origin", &format!("http://{authority}"))],
        &format!(r#"{{"pairing_code":"{code}","device":"test phone"}}"#),
    );
    assert_eq!(status, 201, "{body}");
    let set_cookie = set_cookie.unwrap();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let (status, _, body) = http(&daemon, "GET", "/v1/boxes", &[("Cookie", &cookie)], "");
    assert_eq!(status, 200, "{body}");

    let table = daemon.berth_ok(&["session", "ls"]);
    let header = table.lines().next().unwrap();
    for column in ["ID", "TENANT", "DEVICE", "CREATED", "LAST USED"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.contains("test phone"))
        .unwrap_or_else(|| panic!("{table}"));
    let id = row.split_whitespace().next().unwrap().to_owned();
    assert!(id.starts_with("ws_") && row.contains("default"), "{table}");
    let json: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["session", "ls", "--json"])).unwrap();
    assert_eq!(json["sessions"][0]["id"], id.as_str());

    let out = daemon.berth_ok(&["session", "revoke", &id]);
    assert!(out.contains(&id), "{out}");
    let (status, _, _) = http(&daemon, "GET", "/v1/boxes", &[("Cookie", &cookie)], "");
    assert_eq!(status, 401);
    assert_one_line_error(
        &daemon.berth(&["session", "revoke", &id]),
        1,
        &["no web session"],
    );

    // The code was used up; --json prints the daemon's answer; a bad --ttl is one line.
    let (status, _, _) = http(
        &daemon,
        "POST",
        "/v1/web/sessions",
        &[],
        &format!(r#"{{"pairing_code":"{code}"}}"#),
    );
    assert_eq!(status, 401);
    let json: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["pair", "--json", "--ttl", "1m"])).unwrap();
    assert!(json["code"].as_str().unwrap().starts_with("bwp_"), "{json}");
    assert!(
        json["expires_at"].is_string() && json["url"].is_string(),
        "{json}"
    );
    assert_one_line_error(&daemon.berth(&["pair", "--ttl", "5s"]), 1, &["ttl_s"]);
    assert_one_line_error(
        &daemon.berth(&["pair", "--tenant", "nobody"]),
        1,
        &["no tenant"],
    );
}

#[test]
fn completion_knows_pair_and_session() {
    let out = common::berth()
        .args(["completion", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    for function in [
        "berth__subcmd__pair)",
        "berth__subcmd__session__subcmd__ls)",
        "berth__subcmd__session__subcmd__revoke)",
    ] {
        assert!(
            script.contains(function),
            "no {function} in the bash script"
        );
    }
}

/// Signs a browser in with `key` as the web app does: the `Cookie` value to send back.
fn sign_in_with_key(daemon: &Daemon, key: &str) -> String {
    let (status, set_cookie, body) = http(
        daemon,
        "POST",
        "/v1/web/sessions",
        &[],
        &format!(r#"{{"api_key":"{key}"}}"#),
    );
    assert_eq!(status, 201, "{body}");
    set_cookie.unwrap().split(';').next().unwrap().to_owned()
}

fn boxes_status(daemon: &Daemon, cookie: &str) -> u16 {
    http(daemon, "GET", "/v1/boxes", &[("Cookie", cookie)], "").0
}

/// The `word` that starts with `prefix` in `out`.
fn word(out: &str, prefix: &str) -> String {
    out.split_whitespace()
        .find(|w| w.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}… in {out:?}"))
        .to_owned()
}

#[test]
fn key_rm_and_rotate_say_how_many_browsers_they_signed_out() {
    let daemon = Daemon::start();
    let first = word(&daemon.berth_ok(&["tenant", "create", "acme"]), "berth_");
    let added = daemon.berth_ok(&["tenant", "key", "add", "acme"]);
    let (second, second_id) = (word(&added, "berth_"), word(&added, "key_"));
    let keys = daemon.berth_ok(&["tenant", "key", "ls", "acme"]);
    let first_id = keys
        .lines()
        .find(|l| l.contains(&first[..14]))
        .map(|l| word(l, "key_"))
        .unwrap_or_else(|| panic!("{keys}"));

    let stolen = [
        sign_in_with_key(&daemon, &first),
        sign_in_with_key(&daemon, &first),
    ];
    let kept = sign_in_with_key(&daemon, &second);
    let as_acme = |args: &[&str]| daemon.berth_with(args, None, &[("BERTH_API_KEY", &second)]);
    let listed = stdout(&as_acme(&["session", "ls"]));
    assert!(
        listed.lines().next().unwrap().contains("SIGNED IN WITH"),
        "{listed}"
    );
    assert_eq!(
        listed.lines().filter(|l| l.ends_with(&first_id)).count(),
        2,
        "{listed}"
    );
    let out = daemon.berth_ok(&["tenant", "key", "rm", "acme", &first_id]);
    for cookie in &stolen {
        assert_eq!(boxes_status(&daemon, cookie), 401, "{out}");
    }
    assert_eq!(boxes_status(&daemon, &kept), 200);
    assert!(
        out.starts_with(&format!("key {first_id} revoked; 2 web sessions ended")),
        "{out}"
    );
    // Why a browser the person did not sign in with this key may be signed out too.
    assert!(out.contains("before berth recorded"), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");

    let rotated = daemon.berth_ok(&[
        "tenant",
        "key",
        "rotate",
        "acme",
        &second_id,
        "--revoke-old",
        "--json",
    ]);
    let rotated: serde_json::Value = serde_json::from_str(&rotated).unwrap();
    assert_eq!(rotated["revoked_old"], true, "{rotated}");
    assert_eq!(rotated["web_sessions_ended"], 1, "{rotated}");
    assert_eq!(boxes_status(&daemon, &kept), 401);

    let third_id = rotated["key"]["id"].as_str().unwrap();
    let out = daemon.berth_ok(&["tenant", "key", "rotate", "acme", third_id, "--revoke-old"]);
    assert!(
        out.contains(&format!(
            "key {third_id} revoked; it had signed in no browser"
        )),
        "{out}"
    );
    // The new key is named first.
    let fourth_id = word(&out, "key_");
    assert_ne!(fourth_id, third_id, "{out}");
    let json = daemon.berth_ok(&["tenant", "key", "rm", "acme", &fourth_id, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"revoked": fourth_id, "web_sessions_ended": 0})
    );
}
