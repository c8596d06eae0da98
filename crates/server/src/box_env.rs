//! A box's own environment (`env` at create and in `PATCH /v1/boxes/{ref}`): variables
//! for every process the box runs for a client (exec, terminals, background processes)
//! and for its harness. Not secrets: the store keeps them in plain text and the box's view
//! shows them; secrets go through the egress gateway's credential rules.
//!
//! Precedence, lowest first: berth-init's base environment and the box's credential
//! placeholders < the template's harness `env` < the box's `env` < a request's own `env`.
//! A request reads the record as it is at the request, so a change applies to the next
//! exec at once and to the harness at the box's next start.

use std::collections::BTreeMap;

use berth_protocol::harness::HarnessConfig;
use berth_protocol::service::ServiceConfig;
use berth_protocol::BoxId;

use crate::ctx::Ctx;
use crate::egress::policy::{EgressPolicy, RESERVED_ENV};
use crate::error::OpError;
use crate::ops::box_find::reload;

/// At most this many variables per box.
pub const MAX_VARS: usize = 128;
/// A name's longest.
pub const MAX_NAME_BYTES: usize = 255;
/// A value's longest.
pub const MAX_VALUE_BYTES: usize = 32 * 1024;
/// Every name and value together.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024;

/// `own` over the box's environment: the request wins.
pub fn env_for(
    box_env: &BTreeMap<String, String>,
    own: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = box_env.clone();
    env.extend(own);
    env
}

/// [`env_for`] with the box's environment as its record holds it now.
pub fn env_for_box(
    ctx: &Ctx,
    id: &BoxId,
    own: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, OpError> {
    Ok(env_for(&reload(ctx, id)?.env, own))
}

/// The template's harness config with the box's environment over its `env`.
pub fn harness_with(
    harness: Option<HarnessConfig>,
    box_env: &BTreeMap<String, String>,
) -> Option<HarnessConfig> {
    harness.map(|mut h| {
        over(&mut h.env, box_env);
        h
    })
}

/// The template's services with the box's environment over each one's `env`, as the
/// harness gets it.
pub fn services_with(
    mut services: Vec<ServiceConfig>,
    box_env: &BTreeMap<String, String>,
) -> Vec<ServiceConfig> {
    for service in &mut services {
        over(&mut service.env, box_env);
    }
    services
}

fn over(env: &mut BTreeMap<String, String>, box_env: &BTreeMap<String, String>) {
    env.extend(box_env.iter().map(|(k, v)| (k.clone(), v.clone())));
}

/// Checks a box's environment: POSIX names (`[A-Za-z_][A-Za-z0-9_]*`), no NUL in values,
/// sizes, and no name that berth-init sets itself or that is a placeholder of the box's
/// credential rules (`policy`): either would switch off the box's egress.
pub fn validate(env: &BTreeMap<String, String>, policy: &EgressPolicy) -> Result<(), OpError> {
    let invalid = |name: &str, rule| OpError::InvalidEnv {
        name: name.replace('\0', "\\0"),
        rule,
    };
    if env.len() > MAX_VARS {
        return Err(OpError::TooMany {
            what: "env variables",
            count: env.len(),
            max: MAX_VARS,
        });
    }
    let total: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_TOTAL_BYTES {
        return Err(OpError::TooMany {
            what: "bytes of env names and values",
            count: total,
            max: MAX_TOTAL_BYTES,
        });
    }
    for (name, value) in env {
        let rule = if !posix_name(name) {
            Some("a name is 1 to 255 of A-Z, a-z, 0-9 and _, not starting with a digit")
        } else if value.contains('\0') {
            Some("a value must not contain NUL")
        } else if value.len() > MAX_VALUE_BYTES {
            Some("a value is at most 32768 bytes")
        } else if RESERVED_ENV.contains(&name.as_str()) {
            Some("berth-init sets it itself (the proxy, trust bundle or login variables)")
        } else if policy
            .credentials
            .iter()
            .any(|r| &r.placeholder_env == name)
        {
            Some("it is the placeholder variable of one of the box's credential rules")
        } else {
            None
        };
        if let Some(rule) = rule {
            return Err(invalid(name, rule));
        }
    }
    Ok(())
}

fn posix_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok
        && name.len() <= MAX_NAME_BYTES
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_request_wins_over_the_box_and_the_box_over_the_harness() {
        let merged = env_for(
            &env(&[("A", "box"), ("B", "box")]),
            env(&[("B", "request"), ("C", "request")]),
        );
        assert_eq!(
            merged,
            env(&[("A", "box"), ("B", "request"), ("C", "request")])
        );
        let harness: HarnessConfig = serde_json::from_value(serde_json::json!({
            "command": ["agent"], "env": {"A": "template", "T": "template"}
        }))
        .unwrap();
        let h = harness_with(Some(harness), &env(&[("A", "box")])).unwrap();
        assert_eq!(h.env, env(&[("A", "box"), ("T", "template")]));
        assert!(harness_with(None, &env(&[("A", "box")])).is_none());
        let service: ServiceConfig = serde_json::from_value(serde_json::json!({
            "name": "db", "command": ["db"], "env": {"A": "template", "T": "template"}
        }))
        .unwrap();
        let services = services_with(vec![service], &env(&[("A", "box")]));
        assert_eq!(services[0].env, env(&[("A", "box"), ("T", "template")]));
    }

    #[test]
    fn names_values_and_sizes_are_checked() {
        let none = EgressPolicy::default();
        assert!(validate(&env(&[("GREETING", "hi there"), ("_x1", "")]), &none).is_ok());
        for (name, value) in [
            ("", "v"),
            ("1A", "v"),
            ("A-B", "v"),
            ("A=B", "v"),
            ("É", "v"),
            ("A", "a\0b"),
            ("HTTPS_PROXY", "http://elsewhere"),
            ("HOME", "/tmp"),
        ] {
            let err = validate(&env(&[(name, value)]), &none).unwrap_err();
            assert!(matches!(err, OpError::InvalidEnv { .. }), "{name:?}: {err}");
        }
        assert!(validate(&env(&[(&"A".repeat(256), "v")]), &none).is_err());
        assert!(validate(&env(&[("A", &"v".repeat(32 * 1024 + 1))]), &none).is_err());
        let many: BTreeMap<String, String> =
            (0..129).map(|i| (format!("V{i}"), String::new())).collect();
        let err = validate(&many, &none).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a box has at most 128 env variables, got 129"
        );
        let big: BTreeMap<String, String> = (0..3)
            .map(|i| (format!("V{i}"), "v".repeat(30_000)))
            .collect();
        assert!(validate(&big, &none).is_err());
    }

    #[test]
    fn a_credential_placeholder_is_not_a_box_variable() {
        let policy: EgressPolicy = serde_json::from_value(serde_json::json!({
            "allow": ["api.example.test"],
            "credentials": [{"name": "key", "hosts": ["api.example.test"],
                             "header": "x-api-key", "placeholder_env": "API_KEY"}]
        }))
        .unwrap();
        let err = validate(&env(&[("API_KEY", "mine")]), &policy).unwrap_err();
        assert!(err.to_string().contains("placeholder"), "{err}");
    }
}
