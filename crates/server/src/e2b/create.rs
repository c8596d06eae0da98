//! Creating a sandbox (`POST /sandboxes`, `POST /v2/sandboxes`): a berth box named by a new
//! sandbox id, made by `ops::box_create` like any box and started by its lifecycle owner,
//! plus its sandbox row. The answer comes once the box runs, as E2B's does.
//!
//! What maps to what: `templateID` is a berth template (`base`: berth's default one);
//! `envVars` the box's `env`; `autoResume.enabled` its `auto_resume`; `metadata` is kept in
//! the sandbox row; `allow_internet_access: false` and `network` with `denyOut: ["0.0.0.0/0"]`
//! give the box its own egress allowlist (`allowOut`'s host names, else nothing); berth's
//! idle ladder is off (the timeout is the sandbox's lifetime). What berth cannot do
//! (`mcp`, `iam`, `volumeMounts`, CIDR rules, proxies, public port URLs) is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_protocol::TenantId;
use berth_store::{BoxRecord, E2bIdempotency, E2bInsert, E2bSandbox};
use ring::digest::{digest, SHA256};

use crate::ctx::Ctx;
use crate::e2b::error::E2bError;
use crate::e2b::wire::{NetworkConfig, NewSandbox};
use crate::e2b::{metadata, now_ms, MAX_TIMEOUT_S};
use crate::egress::policy::EgressPolicy;
use crate::ops::{box_create, box_delete, service};
use crate::validate::{LimitsInput, SleepInput};

/// The template E2B's SDKs ask for by default; berth's default template stands for it.
pub const BASE_TEMPLATE: &str = "base";
/// What the v1 create (`NewSandbox`) and v2 create (`NewSandboxV2`) default `timeout` to.
pub const V1_DEFAULT_TIMEOUT_S: i64 = 15;
pub const V2_DEFAULT_TIMEOUT_S: i64 = 300;
/// How long a sandbox being made may take to start before its timeout counts: a start cut
/// short by a crash leaves a box that this deadline then removes.
const START_BUDGET_MS: i64 = 10 * 60 * 1000;
/// How long a create or resume waits for the sandbox's services to start, inside the 60 s
/// E2B's SDKs give a request.
const SERVICES_WAIT: Duration = Duration::from_secs(45);
/// E2B's spelling of "every address" in `denyOut`.
const ALL_TRAFFIC: &str = "0.0.0.0/0";
/// An idempotency key: 1 to 255 of `a-z 0-9 -` (as the SDKs check it).
const MAX_KEY_CHARS: usize = 255;

/// A create request, checked.
#[derive(Debug)]
pub struct CreateSandbox {
    pub request: NewSandbox,
    pub default_timeout_s: i64,
    pub idempotency_key: Option<String>,
}

/// Makes and starts the sandbox; returns its box (running) and its row.
pub async fn create(
    ctx: &Ctx,
    tenant: &TenantId,
    req: CreateSandbox,
) -> Result<(BoxRecord, E2bSandbox), E2bError> {
    let idempotency = req
        .idempotency_key
        .as_deref()
        .map(|key| idempotency(key, &req.request))
        .transpose()?;
    if let Some(idem) = &idempotency {
        if let Some((row, stored)) = ctx.store.e2b_sandbox_by_key(tenant, &idem.key)? {
            return replay(ctx, row, &stored, idem);
        }
    }
    let new = req.request;
    let timeout_s = timeout("timeout", new.timeout.unwrap_or(req.default_timeout_s))?;
    let template = template(ctx, &new.template_id)?;
    let metadata = new.metadata.unwrap_or_default();
    metadata::validate(&metadata)?;
    refuse_unsupported(&new.mcp, &new.iam, &new.volume_mounts)?;
    let egress = egress(new.allow_internet_access, new.network.as_ref())?;
    let auto_pause = new.auto_pause.unwrap_or(false);
    let auto_pause_memory = new.auto_pause_memory.unwrap_or(true);
    if auto_pause && auto_pause_memory {
        require_pause(ctx)?;
    }
    let sandbox_id = new_sandbox_id()?;
    let record = box_create::create_box(
        ctx,
        tenant,
        box_create::CreateBox {
            name: sandbox_id.clone(),
            template,
            limits: LimitsInput::default(),
            // The timeout is the sandbox's lifetime: berth's idle ladder stays off.
            sleep: SleepInput {
                pause_after_s: Some(0),
                snapshot_after_s: Some(0),
                stop_after_s: Some(0),
                auto_resume: Some(new.auto_resume.is_some_and(|a| a.enabled)),
            },
            egress,
            runtime: None,
            disk_mib: None,
            labels: BTreeMap::from([("e2b".to_owned(), "true".to_owned())]),
            env: new.env_vars.unwrap_or_default(),
        },
    )
    .await?;
    let now = now_ms();
    let row = E2bSandbox {
        box_id: record.id.clone(),
        tenant_id: tenant.clone(),
        sandbox_id,
        template_id: new.template_id,
        metadata,
        started_at_ms: now,
        end_at_ms: now + START_BUDGET_MS + timeout_s * 1000,
        timeout_armed: true,
        auto_pause,
        auto_pause_memory,
        secure: new.secure.unwrap_or(true),
        allow_internet_access: new.allow_internet_access,
    };
    // A box without its row is an ordinary box: it is removed again if the row is not made.
    match ctx.store.insert_e2b_sandbox(&row, idempotency.as_ref()) {
        Ok(E2bInsert::Inserted) => {}
        Ok(E2bInsert::KeyTaken(taken, stored)) => {
            remove(ctx, &record).await;
            let idem = idempotency.as_ref().expect("a key was given");
            return replay(ctx, *taken, &stored, idem);
        }
        Err(e) => {
            remove(ctx, &record).await;
            return Err(e.into());
        }
    }
    ctx.e2b.deadline_moved();
    let record = match ctx.lifecycle().start(&record.id).await {
        Ok(record) => record,
        Err(e) => {
            remove(ctx, &record).await;
            return Err(e.into());
        }
    };
    services_started(ctx, &record).await;
    let started = now_ms();
    let row = E2bSandbox {
        started_at_ms: started,
        end_at_ms: started + timeout_s * 1000,
        ..row
    };
    if !ctx
        .store
        .set_e2b_started(&record.id, row.started_at_ms, row.end_at_ms)?
    {
        // Killed while it started.
        return Err(E2bError::SandboxNotFound {
            sandbox_id: row.sandbox_id,
        });
    }
    ctx.e2b.deadline_moved();
    tracing::info!(box_id = %record.id, sandbox_id = %row.sandbox_id, template = %row.template_id, timeout_s, "E2B sandbox created");
    Ok((record, row))
}

/// Waits for the services of a sandbox just started (`ops::service::wait_started`), as an
/// E2B sandbox answers once its template's start command is ready: a program's first
/// command must find them up (E2B's desktop SDK starts an X server and XFCE of its own
/// unless the box's already run).
pub(crate) async fn services_started(ctx: &Ctx, record: &BoxRecord) {
    service::wait_started(ctx, record, SERVICES_WAIT).await;
}

/// A timeout in seconds, checked against E2B's range (0 to 24 hours).
pub fn timeout(field: &'static str, value: i64) -> Result<i64, E2bError> {
    if (0..=MAX_TIMEOUT_S as i64).contains(&value) {
        Ok(value)
    } else {
        Err(E2bError::Timeout {
            field,
            value,
            max_s: MAX_TIMEOUT_S,
        })
    }
}

/// The berth template of an E2B template name: `None` (berth's default) for `base`.
fn template(ctx: &Ctx, name: &str) -> Result<Option<String>, E2bError> {
    if name == BASE_TEMPLATE {
        return Ok(None);
    }
    let registry = ctx.templates.current();
    if registry.get(name).is_some() {
        return Ok(Some(name.to_owned()));
    }
    Err(E2bError::TemplateNotFound {
        template: name.to_owned(),
        available: registry.list().iter().map(|t| t.name.clone()).collect(),
    })
}

fn refuse_unsupported(
    mcp: &Option<serde_json::Value>,
    iam: &Option<serde_json::Value>,
    volume_mounts: &Option<Vec<serde_json::Value>>,
) -> Result<(), E2bError> {
    let given = |v: &Option<serde_json::Value>| {
        v.as_ref().is_some_and(|v| match v {
            serde_json::Value::Null => false,
            serde_json::Value::Object(map) => !map.is_empty(),
            _ => true,
        })
    };
    if given(mcp) {
        return Err(E2bError::UnsupportedField {
            field: "mcp",
            instead: "berth runs no MCP gateway in boxes",
        });
    }
    if given(iam) {
        return Err(E2bError::UnsupportedField {
            field: "iam",
            instead: "berth mints no workload tokens; give the box a credential rule in its egress policy (real secrets never enter a box)",
        });
    }
    if volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(E2bError::UnsupportedField {
            field: "volumeMounts",
            instead: "a berth box has one persistent volume of its own (/home/user), kept across pauses and restarts",
        });
    }
    Ok(())
}

/// The box's own egress policy, or `None` for its template's.
fn egress(
    allow_internet_access: Option<bool>,
    network: Option<&NetworkConfig>,
) -> Result<Option<EgressPolicy>, E2bError> {
    let none = NetworkConfig::default();
    let network = network.unwrap_or(&none);
    let unsupported = |field, instead| Err(E2bError::UnsupportedField { field, instead });
    if network.allow_public_traffic == Some(true) {
        return unsupported(
            "network.allowPublicTraffic",
            "a box's port URLs always take an API key or a share link (`berth port link`)",
        );
    }
    let given = |v: &Option<Vec<_>>| v.as_ref().is_some_and(|v| !v.is_empty());
    if network.egress_proxy.as_ref().is_some_and(|v| !v.is_null())
        || network.rules.as_ref().is_some_and(|v| !v.is_null())
        || network.mask_request_host.is_some()
        || network.dns_servers.is_some()
        || given(&network.https_ports)
    {
        return unsupported(
            "network",
            "berth's egress is an allowlist of host names on port 443 (denyOut [\"0.0.0.0/0\"] with allowOut host names); proxies, rules, DNS servers, host masks and HTTPS ports are not",
        );
    }
    let deny_all = match network.deny_out.as_deref() {
        None | Some([]) => allow_internet_access == Some(false),
        Some([all]) if all == ALL_TRAFFIC => true,
        Some(_) => {
            return unsupported(
                "network.denyOut",
                "berth denies everything a box's egress allowlist does not name: denyOut can only be [\"0.0.0.0/0\"]",
            )
        }
    };
    if !deny_all {
        // E2B allows all traffic unless denied: berth's is the template's allowlist.
        return Ok(None);
    }
    let policy = EgressPolicy {
        allow: network.allow_out.clone().unwrap_or_default(),
        credentials: Vec::new(),
    };
    match policy.validated() {
        Ok(policy) => Ok(Some(policy)),
        Err(_) => unsupported(
            "network.allowOut",
            "berth allows host names and *.suffix wildcards (port 443), not IP addresses or CIDR blocks",
        ),
    }
}

/// A pause that keeps the processes needs a runtime that can pause.
fn require_pause(ctx: &Ctx) -> Result<(), E2bError> {
    let runtime = ctx.runtimes.default_name();
    if ctx.runtimes.capabilities(runtime).pause {
        return Ok(());
    }
    Err(E2bError::CannotPause {
        runtime: runtime.to_owned(),
    })
}

/// 20 lowercase letters and digits from the OS's randomness: a DNS label, like E2B's ids.
fn new_sandbox_id() -> Result<String, E2bError> {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut id = String::with_capacity(20);
    while id.len() < 20 {
        let mut random = [0u8; 32];
        getrandom::fill(&mut random).map_err(crate::error::OpError::Random)?;
        // Only bytes below 252 (7 × 36), so every character is equally likely.
        id.extend(
            random
                .iter()
                .filter(|b| **b < 252)
                .map(|b| ALPHABET[usize::from(*b % 36)] as char)
                .take(20 - id.len()),
        );
    }
    Ok(id)
}

/// The key, checked, and the hash of what the request asks for.
fn idempotency(key: &str, request: &NewSandbox) -> Result<E2bIdempotency, E2bError> {
    let valid = !key.is_empty()
        && key.len() <= MAX_KEY_CHARS
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        return Err(E2bError::InvalidIdempotencyKey);
    }
    let canonical = serde_json::to_vec(request).expect("a request serialises");
    Ok(E2bIdempotency {
        key: key.to_owned(),
        request_hash: berth_basics::hex(digest(&SHA256, &canonical).as_ref()),
    })
}

/// The answer to a request whose idempotency key made a sandbox already: that sandbox, if
/// the request is the same.
fn replay(
    ctx: &Ctx,
    row: E2bSandbox,
    stored: &E2bIdempotency,
    asked: &E2bIdempotency,
) -> Result<(BoxRecord, E2bSandbox), E2bError> {
    if stored.request_hash != asked.request_hash {
        return Err(E2bError::IdempotencyMismatch {
            key: asked.key.clone(),
        });
    }
    let record = ctx
        .store
        .get_box(&row.box_id)?
        .ok_or_else(|| E2bError::SandboxNotFound {
            sandbox_id: row.sandbox_id.clone(),
        })?;
    Ok((record, row))
}

/// Deletes a box made for a sandbox that is not going to be; a failure is only logged
/// (the box then stays, visible in `berth box ls` with the label `e2b=true`).
async fn remove(ctx: &Ctx, record: &BoxRecord) {
    if let Err(e) = box_delete::delete_box(ctx, &record.id).await {
        tracing::warn!(box_id = %record.id, name = %record.name, error = %berth_runtime::error_chain(&e), "cannot remove the box of a sandbox that was not made");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_ids_are_dns_labels_of_twenty() {
        for _ in 0..100 {
            let id = new_sandbox_id().unwrap();
            assert_eq!(id.len(), 20);
            assert!(crate::dns_label::label_rule(&id).is_none(), "{id}");
        }
    }

    #[test]
    fn only_an_allowlist_of_names_becomes_egress() {
        let net = |allow: &[&str], deny: &[&str]| NetworkConfig {
            allow_out: Some(allow.iter().map(|s| (*s).to_owned()).collect()),
            deny_out: Some(deny.iter().map(|s| (*s).to_owned()).collect()),
            ..NetworkConfig::default()
        };
        assert_eq!(egress(None, None).unwrap(), None);
        assert_eq!(egress(Some(true), None).unwrap(), None);
        assert_eq!(
            egress(Some(false), None).unwrap(),
            Some(EgressPolicy::default())
        );
        let allowed = egress(None, Some(&net(&["api.example.com"], &[ALL_TRAFFIC])))
            .unwrap()
            .unwrap();
        assert_eq!(allowed.allow, ["api.example.com"]);
        for (allow, deny) in [
            (&["8.8.8.8"][..], &[ALL_TRAFFIC][..]),
            (&["10.0.0.0/8"][..], &[ALL_TRAFFIC][..]),
            (&[][..], &["1.1.1.1"][..]),
        ] {
            assert!(
                egress(None, Some(&net(allow, deny))).is_err(),
                "{allow:?} {deny:?}"
            );
        }
        let public = NetworkConfig {
            allow_public_traffic: Some(true),
            ..NetworkConfig::default()
        };
        assert!(egress(None, Some(&public)).is_err());
    }
}
