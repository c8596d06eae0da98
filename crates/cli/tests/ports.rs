//! `berth port …` against a real daemon: a server in a sandbox box (python3's
//! http.server) and in a qemu box (busybox httpd), reached through the ports proxy with the
//! API key and with a share link, the link revoked, errors on one line.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use common::{assert_one_line_error, e2e_skip_reason, stdout, Daemon};

/// One HTTP/1.1 request to the daemon: the status, the headers (lowercase names) and the
/// body. `Connection: close`, so the body is what comes until the end.
fn http_get(
    daemon: &Daemon,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let url = std::fs::read_to_string(daemon.dir().join("berth.url")).unwrap();
    let authority = url
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let mut stream = TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn admin_key(daemon: &Daemon) -> String {
    std::fs::read_to_string(daemon.dir().join("admin.key"))
        .unwrap()
        .trim()
        .to_owned()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
}

/// The path (and query) of an absolute URL.
fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").unwrap().1;
    &rest[rest.find('/').unwrap()..]
}

/// The key's GET of `path` through the proxy answers 200 with `expected`.
fn assert_served(daemon: &Daemon, path: &str, expected: &str) {
    let bearer = format!("Bearer {}", admin_key(daemon));
    let (status, _, body) = http_get(daemon, path, &[("authorization", &bearer)]);
    assert_eq!(
        (status, body.as_str()),
        (200, expected),
        "{}",
        daemon.logs()
    );
}

#[test]
fn port_help_lists_its_commands_and_a_bad_port_is_refused_before_any_call() {
    let out = common::berth().args(["port", "--help"]).output().unwrap();
    let text = stdout(&out);
    for command in ["url", "link", "links", "unlink"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing:\n{text}"
        );
    }
    // No daemon is needed to refuse these: clap does, with its usage and status 2.
    for args in [
        &["port", "url", "web", "0"][..],
        &["port", "url", "web", "65536"],
        &["port", "link", "web", "80", "--ttl", "soon"],
    ] {
        let out = common::berth().args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            common::stderr(&out)
        );
    }
}

#[test]
fn berth_port_url_link_links_unlink_on_a_sandbox_box() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start_with_config("[ports]\nbase_domain = \"boxes.test\"\n");
    daemon.berth_ok(&["box", "create", "web"]);
    daemon.berth_ok(&[
        "exec",
        "web",
        "--",
        "sh",
        "-c",
        "mkdir -p ~/www && echo 'hi from web' > ~/www/index.html && \
         setsid python3 -m http.server 8000 -b 127.0.0.1 -d /home/user/www >/dev/null 2>&1 </dev/null &",
    ]);

    let urls = daemon.berth_ok(&["port", "url", "web", "8000"]);
    let lines: Vec<&str> = urls.lines().collect();
    assert_eq!(lines.len(), 2, "{urls}");
    assert!(lines[0].ends_with("/v1/boxes/web/ports/8000/"), "{urls}");
    assert!(
        lines[1].starts_with("http://8000-web.boxes.test:"),
        "{urls}"
    );
    assert!(!urls.contains(&admin_key(&daemon)), "the key is in a URL");
    assert_served(&daemon, path_of(lines[0]), "hi from web\n");

    // A share link: no key, a redirect that sets the cookie, then the page.
    let link = daemon.berth_ok(&["port", "link", "web", "8000", "--ttl", "10m", "--json"]);
    let link: serde_json::Value = serde_json::from_str(&link).unwrap();
    let url = link["url"].as_str().unwrap();
    let (status, headers, _) = http_get(&daemon, path_of(url), &[]);
    assert_eq!(status, 303, "{headers:?}");
    let cookie = header(&headers, "set-cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, _, body) = http_get(
        &daemon,
        header(&headers, "location"),
        &[("cookie", &cookie)],
    );
    assert_eq!((status, body.as_str()), (200, "hi from web\n"));

    let listed = daemon.berth_ok(&["port", "links", "web"]);
    let id = link["id"].as_str().unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(id) && l.contains("live")),
        "{listed}"
    );
    assert!(!listed.contains("bpl_"), "a token is listed: {listed}");
    assert_eq!(
        daemon.berth_ok(&["port", "unlink", "web", id]),
        format!("link {id} revoked\n")
    );
    let (status, _, _) = http_get(&daemon, "/v1/boxes/web/ports/8000/", &[("cookie", &cookie)]);
    assert_eq!(status, 401);
    let (status, _, _) = http_get(&daemon, path_of(url), &[]);
    assert_eq!(status, 403);

    // Mistakes: one line each.
    let out = daemon.berth(&["port", "link", "web", "8000", "--ttl", "1s"]);
    assert_one_line_error(&out, 1, &["ttl_s must be between 10 and 2592000"]);
    let out = daemon.berth(&["port", "url", "nobox", "8000"]);
    assert_one_line_error(&out, 1, &["no box \"nobox\""]);
    let out = daemon.berth(&["port", "unlink", "web", "pl_nope"]);
    assert_one_line_error(&out, 1, &["no share link pl_nope"]);
    assert!(stdout(&out).is_empty());
}

#[test]
fn berth_port_reaches_busybox_httpd_in_a_qemu_box() {
    let Some(daemon) = Daemon::start_with_qemu_box("vm1") else {
        return;
    };
    daemon.berth_ok(&[
        "exec",
        "vm1",
        "--",
        "sh",
        "-c",
        "mkdir -p /home/user/www && echo 'hi from the vm' > /home/user/www/index.html && \
         setsid busybox httpd -f -p 127.0.0.1:8000 -h /home/user/www >/dev/null 2>&1 </dev/null &",
    ]);
    let url = daemon.berth_ok(&["port", "url", "vm1", "8000"]);
    assert_eq!(url.lines().count(), 1, "no base_domain: one URL\n{url}");
    assert_served(
        &daemon,
        &format!("{}index.html", path_of(url.trim())),
        "hi from the vm\n",
    );
    // The guest has no network device but lo: the page came over the guest channel.
    let links = daemon.berth_ok(&["exec", "vm1", "--", "ls", "/sys/class/net"]);
    assert_eq!(links, "lo\n");
}
