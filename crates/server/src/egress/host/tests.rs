use super::*;
use crate::egress::policy::CredentialSpec;
use berth_egress::gateway::AuditSink;

fn policy() -> EgressPolicy {
    EgressPolicy {
        allow: vec!["api.example.test".into(), "*.github.com".into()],
        credentials: vec![CredentialSpec {
            name: "anthropic".into(),
            hosts: vec!["api.example.test".into()],
            header: "x-api-key".into(),
            placeholder_env: "ANTHROPIC_API_KEY".into(),
            methods: vec![],
            paths: vec![],
        }],
    }
    .validated()
    .unwrap()
}

fn secret(name: &str) -> Result<Option<String>, SecretLookupError> {
    Ok((name == "anthropic").then(|| "sk-real".to_owned()))
}

#[test]
fn a_boot_gets_fresh_placeholders_and_a_restart_gets_the_same_back() {
    let dir = tempfile::tempdir().unwrap();
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let id = BoxId::from_random([1; 20]);
    let first = host.prepare(&id, &policy(), secret).unwrap();
    let ph = first.env["ANTHROPIC_API_KEY"].clone();
    assert!(ph.starts_with(PLACEHOLDER_PREFIX) && ph.len() == PLACEHOLDER_PREFIX.len() + 32);
    assert_eq!(first.setup.pinned_hosts, ["api.example.test"]);
    let pem = first.setup.ca_pem.clone().unwrap();

    // The saved state holds the CA key and the placeholder, never the secret.
    let file = dir
        .path()
        .join(BOOTS_DIR)
        .join(format!("{}.json", id.as_str()));
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(!saved.contains("sk-real"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let back = host.restore(&id, secret).unwrap().unwrap();
    assert_eq!(back.env, first.env);
    assert_eq!(back.setup.ca_pem.as_deref(), Some(pem.as_str()));

    let second = host.prepare(&id, &policy(), secret).unwrap();
    assert_ne!(
        second.env["ANTHROPIC_API_KEY"], ph,
        "placeholders rotate per boot"
    );
    assert_ne!(second.setup.ca_pem.as_deref(), Some(pem.as_str()));

    host.end(&id);
    assert!(host.restore(&id, secret).unwrap().is_none());
}

#[test]
fn ca_state_and_audit_files_are_private_even_in_loose_dirs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Directories another tool made world-readable are tightened at start.
    for sub in [BOOTS_DIR, AUDIT_DIR] {
        let path = dir.path().join(sub);
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let id = BoxId::from_random([6; 20]);
    host.prepare(&id, &policy(), secret).unwrap();
    host.audit.record(&audit_record(&id)).unwrap();
    host.audit.sync();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for sub in [BOOTS_DIR, AUDIT_DIR] {
        let path = dir.path().join(sub);
        assert_eq!(mode(&path), 0o700, "{sub}");
        let files: Vec<_> = std::fs::read_dir(&path).unwrap().collect();
        assert_eq!(files.len(), 1, "{sub}");
        for f in files {
            let f = f.unwrap().path();
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
    }
}

fn audit_record(id: &BoxId) -> berth_egress::gateway::AuditRecord {
    berth_egress::gateway::AuditRecord {
        box_id: id.clone(),
        time: "2026-01-01T00:00:00Z".into(),
        target: None,
        port: None,
        via: None,
        resolved: None,
        decision: berth_egress::gateway::Verdict::Deny,
        reason: Some("not_allowed".into()),
        refused: vec![],
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        intercept: false,
        credential: None,
        withheld: None,
        closed: None,
    }
}

#[test]
fn a_damaged_saved_policy_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let id = BoxId::from_random([5; 20]);
    let file = dir
        .path()
        .join(BOOTS_DIR)
        .join(format!("{}.json", id.as_str()));
    let saved = r#"{"policy":{"allow":["*"],"credentials":[]},"ca":null,"placeholders":{}}"#;
    std::fs::write(&file, saved).unwrap();
    let err = host.restore(&id, secret).unwrap_err();
    assert!(matches!(err, EgressBootError::SavedPolicy { .. }), "{err}");
}

#[test]
fn a_missing_secret_says_how_to_set_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let err = host
        .prepare(&BoxId::from_random([2; 20]), &policy(), |_| Ok(None))
        .unwrap_err();
    assert!(
        err.to_string().contains("berth secret set anthropic"),
        "{err}"
    );
}

#[test]
fn no_rules_no_ca() {
    let dir = tempfile::tempdir().unwrap();
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let plain = EgressPolicy {
        allow: vec!["a.example.test".into()],
        credentials: vec![],
    };
    let boot = host
        .prepare(&BoxId::from_random([3; 20]), &plain, |_| unreachable!())
        .unwrap();
    assert!(boot.setup.ca_pem.is_none() && boot.env.is_empty());
}

#[test]
fn audit_pages_follow_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let host = EgressHost::new(dir.path(), &EgressHostConfig::default()).unwrap();
    let id = BoxId::from_random([4; 20]);
    assert!(host.audit_page(&id, 0, 10).unwrap().records.is_empty());
    // A log from before rotation existed (`<box>.jsonl`), its last line half written.
    let path = dir
        .path()
        .join(AUDIT_DIR)
        .join(format!("{}.jsonl", id.as_str()));
    std::fs::write(&path, "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n{\"n\":").unwrap();
    let page = host.audit_page(&id, 0, 2).unwrap();
    assert_eq!((page.records.len(), page.next), (2, 2));
    let page = host.audit_page(&id, page.next, 10).unwrap();
    assert_eq!(page.records, [serde_json::json!({"n": 3})]);
    assert_eq!(page.next, 3, "the half-written line is not skipped over");
    host.remove(&id);
    assert!(!path.exists());
}

#[test]
fn extra_roots_must_be_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let config = EgressHostConfig {
        extra_roots: vec![bad],
        ..Default::default()
    };
    assert!(matches!(
        EgressHost::new(dir.path(), &config),
        Err(EgressSetupError::NoCertificate { .. })
    ));
}
