//! Egress policy as config: a template's `[egress]` in the templates list and in its boxes'
//! views, a box's own policy given at creation (it replaces the template's), and bad
//! policies refused with the entry named. No box starts here.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, TestServer};

const AGENT: &str = r#"name = "agent"

[harness]
command = ["agent"]
env = { MODEL = "claude" }

[egress]
allow = ["API.Anthropic.com", "*.github.com"]

[[egress.credentials]]
name = "anthropic"
hosts = ["api.anthropic.com"]
header = "X-Api-Key"
placeholder_env = "ANTHROPIC_API_KEY"
"#;

fn agent_policy() -> Value {
    json!({
        "allow": ["api.anthropic.com", "*.github.com"],
        "credentials": [{
            "name": "anthropic",
            "hosts": ["api.anthropic.com"],
            "header": "x-api-key",
            "placeholder_env": "ANTHROPIC_API_KEY"
        }]
    })
}

async fn with_agent_template(text: &str) -> TestServer {
    let server = TestServer::without_runtime().await;
    write_agent(&server, text);
    let (status, body) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["errors"], json!([]), "{body}");
    server
}

fn write_agent(server: &TestServer, text: &str) {
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("agent.toml"), text).unwrap();
}

async fn create(server: &TestServer, body: Value) -> (StatusCode, Value) {
    server.call(Method::POST, "/v1/boxes", Some(body)).await
}

#[tokio::test]
async fn templates_list_their_policy_and_builtins_have_none() {
    let server = with_agent_template(AGENT).await;
    let (status, body) = server.call(Method::GET, "/v1/templates", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let templates = body["templates"].as_array().unwrap();
    let of = |name: &str| {
        templates
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {body}"))["egress"]
            .clone()
    };
    assert_eq!(of("agent"), agent_policy());
    let empty = json!({"allow": [], "credentials": []});
    assert_eq!(of("host"), empty);
    assert_eq!(of("echo"), empty);
}

#[tokio::test]
async fn without_egress_a_box_shows_its_templates_current_policy() {
    let server = with_agent_template(AGENT).await;
    let (status, created) = create(&server, json!({"name": "a", "template": "agent"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["egress"], agent_policy());
    assert_eq!(created["egress_source"], "template");

    // The template's policy is looked up anew: a reload shows in the box's view.
    write_agent(
        &server,
        "name = \"agent\"\n[egress]\nallow = [\"pypi.org\"]\n",
    );
    let (status, _) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, view) = server.call(Method::GET, "/v1/boxes/a", None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        view["egress"],
        json!({"allow": ["pypi.org"], "credentials": []})
    );
    assert_eq!(view["egress_source"], "template");

    // A box of a built-in template: nothing leaves.
    let (_, plain) = create(&server, json!({"name": "p"})).await;
    assert_eq!(plain["egress"], json!({"allow": [], "credentials": []}));
    assert_eq!(plain["egress_source"], "template");
}

#[tokio::test]
async fn a_box_of_its_own_policy_keeps_it_over_the_templates() {
    let server = with_agent_template(AGENT).await;
    // What `berth box create --allow` sends: an allowlist, no credential rules.
    let (status, created) = create(
        &server,
        json!({"name": "a", "template": "agent", "egress": {"allow": ["PyPI.org.", "*.GitHub.com"]}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let own = json!({"allow": ["pypi.org", "*.github.com"], "credentials": []});
    assert_eq!(
        created["egress"], own,
        "canonical, and the template's rules are gone"
    );
    assert_eq!(created["egress_source"], "box");

    // A box's own policy may carry credential rules too.
    let rules = json!({
        "allow": ["api.example.test"],
        "credentials": [{"name": "example", "hosts": ["api.example.test"], "header": "Authorization", "placeholder_env": "EXAMPLE_TOKEN"}]
    });
    let (status, ruled) = create(&server, json!({"name": "r", "egress": rules})).await;
    assert_eq!(status, StatusCode::CREATED, "{ruled}");
    assert_eq!(ruled["egress"]["credentials"][0]["header"], "authorization");

    // A template reload does not touch it; get and list show the same.
    write_agent(&server, "name = \"agent\"\n");
    server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    let (_, view) = server.call(Method::GET, "/v1/boxes/a", None).await;
    assert_eq!(
        (&view["egress"], &view["egress_source"]),
        (&own, &json!("box"))
    );
    let (_, list) = server.call(Method::GET, "/v1/boxes", None).await;
    let listed = list["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "a")
        .unwrap();
    assert_eq!(listed["egress"], own);
    assert_eq!(listed["egress_source"], "box");

    // An empty policy of its own is still its own: nothing leaves, whatever the template.
    let (status, sealed) = create(
        &server,
        json!({"name": "s", "template": "agent", "egress": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{sealed}");
    assert_eq!(sealed["egress"], json!({"allow": [], "credentials": []}));
    assert_eq!(sealed["egress_source"], "box");
}

#[tokio::test]
async fn a_bad_policy_is_refused_with_the_entry_named_and_no_box_made() {
    let server = with_agent_template(AGENT).await;
    let rule = |hosts: Value, header: &str, env: &str| json!({"allow": ["a.test"], "credentials": [{"name": "k", "hosts": hosts, "header": header, "placeholder_env": env}]});
    for (egress, want) in [
        (json!({"allow": ["a.test", "b c"]}), "allow[1] \"b c\""),
        (json!({"allow": ["10.0.0.1"]}), "allow[0]"),
        (json!({"allow": ["*"]}), "allow[0]"),
        (
            rule(json!(["b.test"]), "x-api-key", "K"),
            "credentials[0] (k): host \"b.test\" is not allowed",
        ),
        (
            rule(json!([]), "x-api-key", "K"),
            "credentials[0] (k): the rule names no host",
        ),
        (
            rule(json!(["a.test"]), "x api", "K"),
            "credentials[0] (k): header",
        ),
        (
            rule(json!(["a.test"]), "x-api-key", "A=B"),
            "credentials[0] (k): placeholder_env",
        ),
        // Strict: unknown keys, in the policy and in a rule.
        (json!({"allowed": ["a.test"]}), "allowed"),
        (
            json!({"allow": ["a.test"], "credentials": [{"name": "k", "hosts": ["a.test"], "header": "x", "placeholder_env": "K", "value": "sk-1"}]}),
            "value",
        ),
        (json!({"allow": "a.test"}), "expected a sequence"),
        // Bounded: a 1 MiB body of tiny entries is refused before any work.
        (
            json!({"allow": (0..257).map(|i| format!("h{i}.test")).collect::<Vec<_>>()}),
            "`allow` holds 257 entries; at most 256",
        ),
    ] {
        let (status, body) = create(&server, json!({"name": "bad", "egress": egress})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{egress}: {body}");
        assert_eq!(error_code(&body), "invalid_request", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{egress}: {message}");
    }
    // A rule whose placeholder the template's harness sets in its env.
    let (status, body) = create(
        &server,
        json!({"name": "bad", "template": "agent", "egress": rule(json!(["a.test"]), "x", "MODEL")}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"MODEL\"") && message.contains("harness or a service"),
        "{message}"
    );

    let (_, list) = server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(list["boxes"], json!([]), "no box was made");
}

#[tokio::test]
async fn a_box_whose_secret_is_not_set_does_not_start_and_says_how_to_set_it() {
    let server = with_agent_template(AGENT).await;
    let (status, body) = create(&server, json!({"name": "a1", "template": "agent"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server.call(Method::POST, "/v1/boxes/a1/start", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("berth secret set anthropic"), "{body}");
    let (_, shown) = server.call(Method::GET, "/v1/boxes/a1", None).await;
    assert_eq!(shown["state"], "failed", "{shown}");
    assert!(
        shown["state_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("berth secret set anthropic"),
        "{shown}"
    );

    // With the secret set, the start gets past egress (this server has no runtime).
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "anthropic", "value": "sk-test"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, body) = server.call(Method::POST, "/v1/boxes/a1/start", None).await;
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.contains("secret"), "{body}");
    assert!(message.contains("runtime"), "{body}");
}
