//! Egress end to end: a real daemon, real boxes, and real TLS servers on loopback (with a
//! test CA the daemon trusts through `extra_roots`) behind `resolve_overrides`.
//!
//! Needs root, runc, berth-init and python3 (the model stand-in and the box's harness are
//! Python); otherwise each test skips (`berth_testkit::skip`).

mod common;

use common::*;

#[path = "egress/bounds.rs"]
mod bounds;
#[path = "egress/claude_code.rs"]
mod claude_code;
#[path = "egress/world.rs"]
mod world;

use world::*;

#[test]
fn a_harness_reaches_the_model_with_the_real_key_and_the_box_holds_only_a_placeholder() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let mut world = World::new("agent1", &agent_template());
    let secret = world.secret.clone();
    let (daemon, stub) = (&world.daemon, &world.stub);

    // The harness's call goes out through HTTPS_PROXY (CONNECT on 3128) and is intercepted.
    let answer = daemon.berth_ok(&["send", "agent1", "hello gateway"]);
    assert!(
        answer.contains("stub model heard: hello gateway"),
        "{answer}\n{}",
        daemon.logs()
    );
    let requests = stub.requests();
    let call = requests.last().expect("the stand-in got the call");
    assert_eq!(call["path"], "/v1/messages");
    assert_eq!(call["x-api-key"], secret, "the stand-in got the real key");

    // The box has only the placeholder: in the env of exec and of every process…
    let (env, placeholder) = placeholder_in(daemon, "agent1");
    assert!(placeholder.starts_with("berth-ph-"), "{placeholder}");
    assert!(!env.contains(&secret));
    let environs = daemon.berth_ok(&[
        "exec",
        "agent1",
        "--user",
        "root",
        "--",
        "sh",
        "-c",
        // What box root cannot read (berth-init, non-dumpable; a child of it between fork
        // and exec) no one in the box can: skipped, so the loop's status is not the last
        // file's.
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done; true",
    ]);
    assert!(
        environs.contains(&format!("ANTHROPIC_API_KEY={placeholder}")),
        "the harness's environ holds the placeholder: {environs}"
    );
    assert!(
        !environs.contains(&secret),
        "a process in the box holds the secret"
    );
    // …and in no file the box can see (its volume, its run dir, /etc, /tmp, …): grep
    // exits 1 when nothing matches.
    let grep = daemon.berth(&[
        "exec", "agent1", "--user", "root", "--", "grep", "-rlF", &secret, "/home", "/memory",
        "/tmp", "/run", "/var", "/etc", "/root", "/dev/shm", "/opt",
    ]);
    assert_eq!(
        grep.status.code(),
        Some(1),
        "files in the box hold the secret: {}",
        stdout(&grep)
    );

    // Pinned 443 (no proxy): /etc/hosts sends the name to berth-init's listener; the box
    // trusts its CA through SSL_CERT_FILE, and the placeholder is swapped on the way.
    let direct = box_python(
        daemon,
        "agent1",
        &format!(
            "import os, urllib.request as u\n\
             o = u.build_opener(u.ProxyHandler({{}}))\n\
             r = u.Request('https://{MODEL_HOST}/whoami', headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
             print(o.open(r, timeout=20).read().decode())"
        ),
    );
    let seen: serde_json::Value = serde_json::from_str(direct.trim()).unwrap();
    assert_eq!(seen["path"], "/whoami");
    // The stand-in got the real key and echoes the request as it arrived; the gateway
    // scrubs the answer on its way back, so the box reads its own placeholder there.
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
    assert_eq!(seen["x-api-key"], placeholder.as_str(), "{direct}");
    assert!(
        !direct.contains(&secret),
        "the echo laundered the secret: {direct}"
    );

    // The placeholder sent to a host without the rule reaches it unchanged, never the
    // secret (the stream is spliced, not intercepted: the box sees the stand-in's own
    // certificate, which it does not trust, hence no verification in this probe).
    let plain = box_python(
        daemon,
        "agent1",
        &format!(
            "import os, ssl, urllib.request as u\n\
             r = u.Request('https://{PLAIN_HOST}/echo', headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
             print(u.urlopen(r, timeout=20, context=ssl._create_unverified_context()).read().decode())"
        ),
    );
    let seen: serde_json::Value = serde_json::from_str(plain.trim()).unwrap();
    assert_eq!(seen["x-api-key"], placeholder.as_str());

    // Every decision is in the audit log, with the credential rule named for the swap.
    let audit = daemon.berth_ok(&["egress", "agent1", "--json"]);
    let records: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let allowed = |via: &str, target: &str| {
        records
            .iter()
            .any(|r| r["decision"] == "allow" && r["via"] == via && r["target"] == target)
    };
    assert!(allowed("connect", MODEL_HOST), "{audit}");
    assert!(allowed("direct", MODEL_HOST), "{audit}");
    assert!(allowed("connect", PLAIN_HOST), "{audit}");
    assert!(
        records
            .iter()
            .any(|r| r["credential"] == "anthropic" && r["intercept"] == true),
        "{audit}"
    );
    assert!(!audit.contains(&secret) && !audit.contains(&placeholder));

    // Nothing on the host's disk holds the secret in the clear: not the database (it is
    // sealed), not the box's files, not the saved CA state, not the daemon's log.
    let leaks = files_containing(daemon.dir(), secret.as_bytes());
    assert!(leaks.is_empty(), "the secret is in the clear in {leaks:?}");

    // A daemon that crashed reattaches the running box with the same CA and placeholder
    // (the box trusts and holds them): the harness's next call still gets the real key.
    let requests_before = stub.requests().len();
    world.daemon.crash_and_restart();
    let (daemon, stub) = (&world.daemon, &world.stub);
    let answer = daemon.berth_ok(&["send", "agent1", "after a crash"]);
    assert!(
        answer.contains("stub model heard: after a crash"),
        "{answer}\n{}",
        daemon.logs()
    );
    assert_eq!(stub.requests().len(), requests_before + 1);
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
    let env = daemon.berth_ok(&["exec", "agent1", "--", "env"]);
    assert!(
        env.contains(&format!("ANTHROPIC_API_KEY={placeholder}\n")),
        "the box was restarted instead of reattached: {env}"
    );

    // A new boot rotates the placeholder; the old one is worthless.
    daemon.berth_ok(&["box", "stop", "agent1"]);
    let env = daemon.berth_ok(&["exec", "agent1", "--", "env"]);
    assert!(
        !env.contains(&placeholder),
        "the placeholder did not rotate"
    );
    let answer = daemon.berth_ok(&["send", "agent1", "again"]);
    assert!(answer.contains("stub model heard: again"), "{answer}");
    assert_eq!(stub.requests().last().unwrap()["x-api-key"], secret);
}

/// A rule restricted to `POST /v1/messages`: the harness's calls get the real key; a GET
/// to the same host, and a POST to a path that only looks like it is under the prefix,
/// carry the placeholder upstream and are audited as withheld.
#[test]
fn a_rule_restricted_to_post_v1_messages_injects_nowhere_else() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let template = agent_template().replace(
        "placeholder_env = \"ANTHROPIC_API_KEY\"\n",
        "placeholder_env = \"ANTHROPIC_API_KEY\"\nmethods = [\"POST\"]\npaths = [\"/v1/messages\"]\n",
    );
    assert!(template.contains("methods"), "{template}");
    let world = World::new("scoped", &template);
    let (daemon, stub, secret) = (&world.daemon, &world.stub, &world.secret);

    let answer = daemon.berth_ok(&["send", "scoped", "hello scoped"]);
    assert!(
        answer.contains("stub model heard: hello scoped"),
        "{answer}"
    );
    assert_eq!(
        stub.requests().last().unwrap()["x-api-key"],
        secret.as_str()
    );

    let probe = |method: &str, path: &str| {
        box_python(
            daemon,
            "scoped",
            &format!(
                "import os, urllib.request as u\n\
                 o = u.build_opener(u.ProxyHandler({{}}))\n\
                 r = u.Request('https://{MODEL_HOST}{path}', method='{method}', data=b'{{}}' if '{method}' == 'POST' else None, headers={{'x-api-key': os.environ['ANTHROPIC_API_KEY']}})\n\
                 print(o.open(r, timeout=20).read().decode())"
            ),
        )
    };
    let (_, placeholder) = placeholder_in(daemon, "scoped");
    for (method, path) in [
        ("GET", "/v1/messages"),
        ("POST", "/v1/messages/%2e%2e/admin"),
    ] {
        let out = probe(method, path);
        assert!(!out.contains(secret.as_str()), "{out}");
        let last = stub.requests().last().unwrap().clone();
        assert_eq!(last["method"], method, "{last}");
        assert_eq!(
            last["x-api-key"],
            placeholder.as_str(),
            "{method} {path}: the secret went up"
        );
    }
    let audit = daemon.berth_ok(&["egress", "scoped", "--json"]);
    let records: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for reason in ["method", "path_ambiguous"] {
        assert!(
            records
                .iter()
                .any(|r| r["withheld"]["rule"] == "anthropic" && r["withheld"]["reason"] == reason),
            "no withheld {reason} in {audit}"
        );
    }
    assert!(
        records.iter().any(|r| r["credential"] == "anthropic"),
        "{audit}"
    );
    let table = daemon.berth_ok(&["egress", "scoped"]);
    assert!(table.contains("withheld anthropic: method"), "{table}");
}
