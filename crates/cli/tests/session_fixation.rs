//! Session fixation through the ports proxy (issue 20), as an attacker would try it: a
//! real `berth up`, tenant A's real sandbox box running an app (`fixtures/cookie_app.py`)
//! that answers with `Set-Cookie` naming A's own web session (or a pile of big cookies),
//! and victims as `curl` with a cookie jar. Victim 1 is signed in as tenant B and opens
//! A's share link; victim 2 opens it first and then pairs with a code of B's. Both must
//! end as B: never as A, never signed out. By path on 127.0.0.1 (berth's own origin), and
//! at a port's host name under a `base_domain` that shares a registrable domain with
//! berth's host (over TLS, names resolved by curl), where `berth up` also warns.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{e2e_skip_reason, self_signed, Daemon};

const APP: &str = include_str!("fixtures/cookie_app.py");
const APP_PORT: &str = "8000";

/// A browser stand-in: curl with a cookie jar of its own, following redirects.
struct Browser {
    jar: PathBuf,
    dir: tempfile::TempDir,
    /// `-k`, `--resolve …`: how this browser reaches the daemon.
    reach: Vec<String>,
}

/// One answer: the status, the `Set-Cookie` values, the body.
struct Answer {
    status: u16,
    set_cookies: Vec<String>,
    body: String,
}

impl Browser {
    fn new(reach: &[String]) -> Browser {
        let dir = tempfile::tempdir().unwrap();
        let jar = dir.path().join("jar");
        std::fs::write(&jar, "").unwrap();
        Browser {
            jar,
            dir,
            reach: reach.to_vec(),
        }
    }

    /// `method url`, sending and keeping cookies, following redirects (GET only); with a
    /// JSON `body` and `Origin`, as a page of `origin` would send it.
    fn call(&self, method: &str, url: &str, body: Option<(&str, &str)>) -> Answer {
        let (head, out) = (self.dir.path().join("head"), self.dir.path().join("body"));
        let mut curl = Command::new("curl");
        curl.args(["-sS", "--max-time", "120", "-X", method])
            .args(&self.reach)
            .arg("-b")
            .arg(&self.jar)
            .arg("-c")
            .arg(&self.jar)
            .arg("-D")
            .arg(&head)
            .arg("-o")
            .arg(&out)
            .args(["-w", "%{http_code}"]);
        if method == "GET" {
            curl.arg("-L");
        }
        if let Some((json, origin)) = body {
            curl.args(["-H", "content-type: application/json", "-H"])
                .arg(format!("origin: {origin}"))
                .args(["--data-binary", json]);
        }
        let done = curl.arg(url).output().unwrap();
        let status = String::from_utf8_lossy(&done.stdout);
        assert!(
            done.status.success(),
            "curl {method} {url}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let head = std::fs::read_to_string(&head).unwrap_or_default();
        Answer {
            status: status.trim().parse().unwrap(),
            set_cookies: head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .filter(|(name, _)| name.eq_ignore_ascii_case("set-cookie"))
                .map(|(_, value)| value.trim().to_owned())
                .collect(),
            body: std::fs::read_to_string(&out).unwrap_or_default(),
        }
    }

    fn get(&self, url: &str) -> Answer {
        self.call("GET", url, None)
    }

    fn jar(&self) -> String {
        std::fs::read_to_string(&self.jar).unwrap()
    }
}

/// The two tenants: A (the attacker, owner of box `web` running the app) and B.
struct Scene<'a> {
    daemon: &'a Daemon,
    /// berth's own origin as the victims reach it.
    base: String,
    reach: Vec<String>,
    /// A's own web session token, which its app hands out.
    a_token: String,
    /// A share link to A's app: `?berth_link=…`.
    link_query: String,
}

impl Scene<'_> {
    /// Tenants `a` and `b` (B owns box `b-box`, never started), A's box `web` serving the
    /// app on [`APP_PORT`] with A's own session token, and a share link to it.
    fn set_up<'a>(daemon: &'a Daemon, base: &str, reach: &[String]) -> Scene<'a> {
        let key_of = |created: &str| {
            created
                .split_whitespace()
                .find(|w| w.starts_with("berth_"))
                .unwrap_or_else(|| panic!("no key in {created}"))
                .to_owned()
        };
        let a_key = key_of(&daemon.berth_ok(&["tenant", "create", "a"]));
        let b_key = key_of(&daemon.berth_ok(&["tenant", "create", "b"]));
        let as_tenant = |key: &str, args: &[&str]| {
            let out = daemon.berth_with(args, None, &[("BERTH_API_KEY", key)]);
            assert!(
                out.status.success(),
                "berth {args:?}: {}\n{}",
                common::stderr(&out),
                daemon.logs()
            );
            common::stdout(&out)
        };
        as_tenant(&b_key, &["box", "create", "b-box"]);

        // A signs its own browser in, as anyone may, and puts the token in its app.
        let attacker = Browser::new(reach);
        let signed_in = attacker.call(
            "POST",
            &format!("{base}/v1/web/sessions"),
            Some((&format!(r#"{{"api_key":"{a_key}"}}"#), base)),
        );
        assert_eq!(signed_in.status, 201, "{}", signed_in.body);
        let a_token = signed_in
            .set_cookies
            .iter()
            .find_map(|c| c.split(';').next()?.split_once("berth_session="))
            .map(|(_, token)| token.to_owned())
            .unwrap_or_else(|| panic!("no session cookie in {:?}", signed_in.set_cookies));

        as_tenant(&a_key, &["box", "create", "web"]);
        let app = daemon.dir().join("cookie_app.py");
        std::fs::write(&app, APP).unwrap();
        as_tenant(
            &a_key,
            &["cp", app.to_str().unwrap(), "web:/home/user/cookie_app.py"],
        );
        as_tenant(
            &a_key,
            &[
                "exec",
                "--background",
                "web",
                "--",
                "python3",
                "/home/user/cookie_app.py",
                APP_PORT,
                &a_token,
            ],
        );
        let link: serde_json::Value = serde_json::from_str(&as_tenant(
            &a_key,
            &["port", "link", "web", APP_PORT, "--ttl", "1h", "--json"],
        ))
        .unwrap();
        let url = link["url"].as_str().unwrap();
        let link_query = url[url.find('?').unwrap()..].to_owned();
        Scene {
            daemon,
            base: base.to_owned(),
            reach: reach.to_vec(),
            a_token,
            link_query,
        }
    }

    /// A new browser signed in as B with a pairing code of B's, as the web app does.
    fn pair_as_b(&self, browser: &Browser) {
        let pairing: serde_json::Value =
            serde_json::from_str(&self.daemon.berth_ok(&["pair", "--tenant", "b", "--json"]))
                .unwrap();
        let body = format!(
            r#"{{"pairing_code":"{}"}}"#,
            pairing["code"].as_str().unwrap()
        );
        let paired = browser.call(
            "POST",
            &format!("{}/v1/web/sessions", self.base),
            Some((&body, &self.base)),
        );
        assert_eq!(paired.status, 201, "{}", paired.body);
    }

    /// The browser is B's: this browser's session and its box list are B's.
    fn assert_still_b(&self, browser: &Browser, what: &str) {
        let me = browser.get(&format!("{}/v1/web/session", self.base));
        assert_eq!(
            me.status,
            200,
            "{what}: GET /v1/web/session: {}\njar:\n{}",
            me.body,
            browser.jar()
        );
        let me: serde_json::Value = serde_json::from_str(&me.body).unwrap();
        assert_eq!(me["tenant"], "b", "{what}: the browser runs as {me}");
        let boxes = browser.get(&format!("{}/v1/boxes", self.base));
        assert_eq!(boxes.status, 200, "{what}: {}", boxes.body);
        let boxes: serde_json::Value = serde_json::from_str(&boxes.body).unwrap();
        let names: Vec<&str> = boxes["boxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b-box"], "{what}");
        assert!(
            !browser.jar().contains(&self.a_token),
            "{what}: A's session is in the jar:\n{}",
            browser.jar()
        );
    }

    /// Both victims, opening A's app at `page_url` through its share link.
    fn victims(&self, page_url: &str, what: &str) {
        let link = format!("{page_url}{}", self.link_query);

        let pairs_after = Browser::new(&self.reach);
        let opened = pairs_after.get(&link);
        assert_eq!(opened.status, 200, "{what}: {}", opened.body);
        assert!(opened.body.contains("tenant A's app"), "{}", opened.body);
        self.pair_as_b(&pairs_after);
        self.assert_still_b(&pairs_after, &format!("{what}, victim paired after"));

        // curl sends the SameSite=Strict session cookie with the link too (a browser does
        // when the link is pasted): the link still opens A's app for a browser of B's.
        let signed_in = Browser::new(&self.reach);
        self.pair_as_b(&signed_in);
        let opened = signed_in.get(&link);
        assert_eq!(opened.status, 200, "{what}: {}", opened.body);
        assert!(opened.body.contains("tenant A's app"), "{}", opened.body);
        self.assert_still_b(&signed_in, &format!("{what}, victim signed in first"));
    }
}

fn curl_skip_reason() -> Option<String> {
    match Command::new("curl").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no curl (scripts/install-deps.sh --tests)".into()),
    }
}

/// Whether the box runtime and curl are here; says why not (a skip) otherwise.
fn can_run() -> bool {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return false;
    }
    if let Some(reason) = curl_skip_reason() {
        berth_testkit::skip("curl", &reason);
        return false;
    }
    true
}

#[test]
fn an_apps_cookies_by_path_sign_no_victim_in_as_its_tenant_nor_out() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start();
    let base = std::fs::read_to_string(daemon.dir().join("berth.url"))
        .unwrap()
        .trim()
        .to_owned();
    let scene = Scene::set_up(&daemon, &base, &[]);
    let app = format!("{base}/v1/boxes/web/ports/{APP_PORT}");
    // The pile's last step only: curl sums every answer's headers along a redirect chain
    // and stops at 300 KiB, while 15 cookies already crowd its 8 KiB Cookie header.
    for page in ["path-v1", "path-root", "host-name", "pile/7"] {
        scene.victims(&format!("{app}/{page}"), page);
    }
}

#[test]
fn an_apps_domain_cookie_at_a_port_host_signs_no_victim_in_and_berth_up_warns() {
    if !can_run() {
        return;
    }
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(
        files.path(),
        "berth",
        &["berth.example.test", "*.boxes.example.test"],
    );
    let daemon = Daemon::start_in(
        tempfile::tempdir().unwrap(),
        Some("[ports]\nbase_domain = \"boxes.example.test\"\n"),
        &[
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    );
    let port = listen_port(daemon.dir());
    // berth and the port's host name share the registrable domain example.test.
    let reach: Vec<String> = [
        "-k".to_owned(),
        "--resolve".to_owned(),
        format!("berth.example.test:{port}:127.0.0.1"),
        "--resolve".to_owned(),
        format!("{APP_PORT}-web.boxes.example.test:{port}:127.0.0.1"),
    ]
    .into();
    let base = format!("https://berth.example.test:{port}");
    assert!(
        !daemon.logs().contains("shares the registrable domain"),
        "warned before any request showed berth's host:\n{}",
        daemon.logs()
    );
    let scene = Scene::set_up(&daemon, &base, &reach);
    scene.victims(
        &format!("https://{APP_PORT}-web.boxes.example.test:{port}/domain"),
        "domain",
    );
    let warnings = daemon
        .logs()
        .matches("[ports] base_domain boxes.example.test shares the registrable domain example.test with berth's own host berth.example.test")
        .count();
    assert_eq!(warnings, 1, "{}", daemon.logs());
}

#[test]
fn berth_up_warns_at_start_when_the_public_url_shares_a_site_with_base_domain() {
    for (base_domain, warned) in [("boxes.example.com", true), ("example-boxes.net", false)] {
        let daemon = Daemon::start_in(
            tempfile::tempdir().unwrap(),
            Some(&format!("[ports]\nbase_domain = \"{base_domain}\"\n")),
            &[
                "--public-url".as_ref(),
                "https://berth.example.com".as_ref(),
            ],
        );
        let logs = daemon.logs();
        assert_eq!(
            logs.contains(
                "shares the registrable domain example.com with berth's own host berth.example.com"
            ),
            warned,
            "{base_domain}:\n{logs}"
        );
    }
}

/// The port `berth up` listens on (from `berth.url`).
fn listen_port(dir: &Path) -> u16 {
    let url = std::fs::read_to_string(dir.join("berth.url")).unwrap();
    url.trim().rsplit(':').next().unwrap().parse().unwrap()
}
