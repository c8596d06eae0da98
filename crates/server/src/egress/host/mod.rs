//! The gateway as the daemon runs it: one [`Gateway`] for every box (resolver, audit log,
//! `resolve_overrides`), and per boot of a box its allowlist, CA, placeholders and the
//! secrets of its credential rules.
//!
//! A boot's CA key and placeholders are saved to `<data>/ca/<box>.json` (0600) so that a
//! restarted daemon can reattach a running box that still trusts that CA and still holds
//! those placeholders. Secrets are never saved there: they are read from the secret store
//! again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_egress::gateway::{
    AuditLimits, BoxEgress, Gateway, GatewayConfig, HandoffSender, JsonlDirSink, SystemResolver,
    Timeouts,
};
use berth_egress::intercept::{BoxCa, CredentialRule, InterceptConfig, Interceptor, SavedCa};
use berth_protocol::BoxId;
use berth_runtime::{EgressListener, EgressSetup};
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub use error::{EgressBootError, EgressSetupError};

use super::policy::EgressPolicy;
use crate::host_config::EgressHostConfig;
use crate::metrics::egress::CountingSink;
use crate::metrics::EgressCounters;

/// Why a credential rule's secret could not be read (the secret store's error, boxed so the
/// gateway's bookkeeping does not depend on the store).
pub type SecretLookupError = Box<dyn std::error::Error + Send + Sync>;

/// Where the gateway's audit log lives: `<data>/audit/<box>.jsonl`.
pub const AUDIT_DIR: &str = "audit";
/// Where each running box's CA and placeholders are kept: `<data>/ca/<box>.json`.
pub const BOOTS_DIR: &str = "ca";
/// What a placeholder starts with, so it is recognisable in logs and in the box.
pub const PLACEHOLDER_PREFIX: &str = "berth-ph-";

/// One boot's egress: what the box is given and what the gateway enforces for it.
pub struct BootEgress {
    /// For the box spec: pinned names and the CA.
    pub setup: EgressSetup,
    /// For the box spec: each rule's placeholder in its `placeholder_env`.
    pub env: BTreeMap<String, String>,
    egress: BoxEgress,
    interceptor: Option<Arc<Interceptor>>,
}

impl std::fmt::Debug for BootEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootEgress")
            .field("setup", &self.setup)
            .field("intercepts", &self.interceptor.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves one boot's egress channel; dropping it closes the channel, cuts open
/// connections and lets each write its audit line.
#[derive(Debug)]
pub struct EgressTask {
    _stop: oneshot::Sender<()>,
}

/// The saved part of a boot (no secrets).
#[derive(Serialize, Deserialize)]
struct SavedBoot {
    policy: EgressPolicy,
    ca: Option<SavedCa>,
    /// Rule name → placeholder.
    placeholders: BTreeMap<String, String>,
}

/// A page of a box's audit log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// One object per decision, oldest first (see docs/security.md for the fields).
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<serde_json::Value>,
    /// Pass as `after` to get the records after these.
    pub next: u64,
}

pub struct EgressHost {
    gateway: Gateway,
    audit: Arc<JsonlDirSink>,
    /// Bytes and refusals, counted from every audit record (`/metrics`).
    counters: Arc<EgressCounters>,
    extra_roots: Vec<CertificateDer<'static>>,
    boots_dir: PathBuf,
}

impl EgressHost {
    pub fn new(data_dir: &Path, config: &EgressHostConfig) -> Result<EgressHost, EgressSetupError> {
        let extra_roots = config
            .extra_roots
            .iter()
            .map(|path| load_root(path))
            .collect::<Result<Vec<_>, _>>()?;
        // A bad root fails the daemon's start, not every box's.
        for (path, der) in config.extra_roots.iter().zip(&extra_roots) {
            rustls::RootCertStore::empty()
                .add(der.clone())
                .map_err(|source| EgressSetupError::BadRoot {
                    path: path.clone(),
                    source,
                })?;
        }
        let limits = AuditLimits {
            max_file_bytes: config.audit_max_file_bytes,
            max_files: usize::try_from(config.audit_max_files).unwrap_or(usize::MAX),
            queue: usize::try_from(config.audit_queue).unwrap_or(usize::MAX),
        };
        let audit = Arc::new(
            JsonlDirSink::with_limits(data_dir.join(AUDIT_DIR), limits)
                .map_err(EgressSetupError::Audit)?,
        );
        let counters = Arc::new(EgressCounters::default());
        let gateway = Gateway::new(
            GatewayConfig {
                resolve_overrides: config.resolve_overrides.clone(),
                timeouts: Timeouts {
                    idle: Duration::from_secs(config.idle_timeout_secs),
                    ..Timeouts::default()
                },
                max_connections_per_box: usize::try_from(config.max_connections_per_box)
                    .unwrap_or(usize::MAX),
                // A sandbox's berth-init hands its connections over; no one else in a box may.
                handoff_from: HandoffSender::BoxInit,
            },
            Arc::new(SystemResolver),
            Arc::new(CountingSink {
                counters: counters.clone(),
                inner: audit.clone(),
            }),
        )
        .map_err(EgressSetupError::Gateway)?;
        let boots_dir = data_dir.join(BOOTS_DIR);
        std::fs::create_dir_all(&boots_dir)
            .and_then(|()| {
                std::fs::set_permissions(
                    &boots_dir,
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                )
            })
            .map_err(|source| EgressSetupError::Dir {
                path: boots_dir.clone(),
                source,
            })?;
        Ok(EgressHost {
            gateway,
            audit,
            counters,
            extra_roots,
            boots_dir,
        })
    }

    /// A new boot of `id` under `policy` (validated): a fresh CA and fresh placeholders when
    /// it has credential rules, each rule's secret read through `secret`. Saved for a
    /// later [`EgressHost::restore`].
    pub fn prepare<F>(
        &self,
        id: &BoxId,
        policy: &EgressPolicy,
        secret: F,
    ) -> Result<BootEgress, EgressBootError>
    where
        F: FnMut(&str) -> Result<Option<String>, SecretLookupError>,
    {
        let (ca, placeholders) = if policy.credentials.is_empty() {
            (None, BTreeMap::new())
        } else {
            let ca = BoxCa::new(id).map_err(EgressBootError::Ca)?;
            let mut placeholders = BTreeMap::new();
            for rule in &policy.credentials {
                placeholders.insert(rule.name.clone(), new_placeholder()?);
            }
            (Some(ca), placeholders)
        };
        let saved = SavedBoot {
            policy: policy.clone(),
            ca: ca.as_ref().map(BoxCa::save),
            placeholders,
        };
        let file = serde_json::to_vec(&saved).expect("the saved boot serialises");
        // Saved only once every secret is there: a start that fails leaves no CA key behind.
        let boot = self.boot(id, saved, ca, secret)?;
        self.save(id, &file)?;
        Ok(boot)
    }

    /// The boot of a running box as [`EgressHost::prepare`] made it (after a daemon
    /// restart); `None` when nothing was saved for it.
    pub fn restore<F>(&self, id: &BoxId, secret: F) -> Result<Option<BootEgress>, EgressBootError>
    where
        F: FnMut(&str) -> Result<Option<String>, SecretLookupError>,
    {
        let Some(saved) = self.read_saved(id)? else {
            return Ok(None);
        };
        self.boot_saved(id, saved, secret).map(Some)
    }

    /// The boot of a box restored from its snapshot, under `policy` (the box's policy now):
    /// the saved CA and placeholders, which the restored box trusts and holds. `None` when
    /// nothing was saved, or `policy` has a credential rule the snapshotted boot holds no
    /// placeholder for (only a cold boot can give the box one).
    pub fn restore_under<F>(
        &self,
        id: &BoxId,
        policy: &EgressPolicy,
        secret: F,
    ) -> Result<Option<BootEgress>, EgressBootError>
    where
        F: FnMut(&str) -> Result<Option<String>, SecretLookupError>,
    {
        let Some(mut saved) = self.read_saved(id)? else {
            return Ok(None);
        };
        let held = |name: &String| saved.placeholders.contains_key(name);
        if !policy.credentials.iter().all(|rule| held(&rule.name))
            || (!policy.credentials.is_empty() && saved.ca.is_none())
        {
            return Ok(None);
        }
        saved
            .placeholders
            .retain(|name, _| policy.credentials.iter().any(|rule| &rule.name == name));
        saved.policy = policy.clone();
        let file = serde_json::to_vec(&saved).expect("the saved boot serialises");
        let boot = self.boot_saved(id, saved, secret)?;
        self.save(id, &file)?;
        Ok(Some(boot))
    }

    /// The saved boot of `id`, its policy checked again; `None` when nothing was saved.
    fn read_saved(&self, id: &BoxId) -> Result<Option<SavedBoot>, EgressBootError> {
        let path = self.boot_file(id);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(EgressBootError::Io {
                    action: "read",
                    path,
                    source,
                })
            }
        };
        let mut saved: SavedBoot =
            serde_json::from_slice(&bytes).map_err(|source| EgressBootError::Saved {
                path: path.clone(),
                source,
            })?;
        // A file edited by hand (or by an older berth) must not reach `allowlist()`, which
        // trusts a validated policy.
        saved.policy = saved
            .policy
            .validated()
            .map_err(|source| EgressBootError::SavedPolicy { path, source })?;
        Ok(Some(saved))
    }

    fn boot_saved<F>(
        &self,
        id: &BoxId,
        saved: SavedBoot,
        secret: F,
    ) -> Result<BootEgress, EgressBootError>
    where
        F: FnMut(&str) -> Result<Option<String>, SecretLookupError>,
    {
        let ca = saved
            .ca
            .as_ref()
            .map(|c| BoxCa::restore(id, c))
            .transpose()
            .map_err(EgressBootError::Ca)?;
        self.boot(id, saved, ca, secret)
    }

    fn boot<F>(
        &self,
        id: &BoxId,
        saved: SavedBoot,
        ca: Option<BoxCa>,
        mut secret: F,
    ) -> Result<BootEgress, EgressBootError>
    where
        F: FnMut(&str) -> Result<Option<String>, SecretLookupError>,
    {
        let policy = saved.policy;
        let mut env = BTreeMap::new();
        let mut rules = Vec::with_capacity(policy.credentials.len());
        for spec in &policy.credentials {
            let placeholder = saved
                .placeholders
                .get(&spec.name)
                .cloned()
                .map_or_else(new_placeholder, Ok)?;
            let value = secret(&spec.name)
                .map_err(|source| EgressBootError::Secret {
                    name: spec.name.clone(),
                    source,
                })?
                .ok_or_else(|| EgressBootError::MissingSecret {
                    name: spec.name.clone(),
                })?;
            env.insert(spec.placeholder_env.clone(), placeholder.clone());
            rules.push(
                CredentialRule::new(&spec.name, &spec.hosts, &spec.header, placeholder, value)
                    .and_then(|rule| rule.restricted(&spec.methods, &spec.paths))
                    .map_err(EgressBootError::Rule)?,
            );
        }
        let setup = EgressSetup {
            pinned_hosts: policy.pinned_hosts(),
            ca_pem: ca.as_ref().map(BoxCa::cert_pem),
        };
        let interceptor = match ca {
            Some(ca) => Some(Arc::new(
                Interceptor::new(
                    ca,
                    InterceptConfig {
                        extra_roots: self.extra_roots.clone(),
                        ..InterceptConfig::new(rules)
                    },
                )
                .map_err(EgressBootError::Intercept)?,
            )),
            None => None,
        };
        Ok(BootEgress {
            setup,
            env,
            egress: BoxEgress {
                box_id: id.clone(),
                allow: policy.allowlist(),
            },
            interceptor,
        })
    }

    /// Starts serving the box's egress channel for this boot.
    pub fn serve(&self, boot: &BootEgress, listener: EgressListener) -> EgressTask {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let gateway = self.gateway.clone();
        let egress = boot.egress.clone();
        match boot.interceptor.clone() {
            Some(interceptor) => tokio::spawn(async move {
                gateway
                    .serve_box_intercepting(listener, egress, interceptor, shutdown)
                    .await
            }),
            None => {
                tokio::spawn(async move { gateway.serve_box(listener, egress, shutdown).await })
            }
        };
        EgressTask { _stop: stop }
    }

    /// The boot is over: its CA key and placeholders are dropped from disk.
    pub fn end(&self, id: &BoxId) {
        let path = self.boot_file(id);
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(box_id = %id, path = %path.display(), error = %e, "cannot remove the saved egress state");
            }
        }
    }

    /// The box is deleted: its boot state and its audit log go too.
    pub fn remove(&self, id: &BoxId) {
        self.end(id);
        self.audit.remove(id);
    }

    /// The gateway's bytes and refusals so far.
    pub fn counters(&self) -> &EgressCounters {
        &self.counters
    }

    /// Returns once every audit line queued so far is written (the daemon's last step).
    pub fn flush_audit(&self) {
        self.audit.sync();
    }

    /// Up to `limit` audit records of the box from record `after` on, across its rotated
    /// files, oldest first (records rotated away are skipped).
    pub fn audit_page(&self, id: &BoxId, after: u64, limit: usize) -> std::io::Result<AuditPage> {
        let (records, next) = self.audit.read_page(id, after, limit)?;
        Ok(AuditPage { records, next })
    }

    fn boot_file(&self, id: &BoxId) -> PathBuf {
        self.boots_dir.join(format!("{}.json", id.as_str()))
    }

    fn save(&self, id: &BoxId, json: &[u8]) -> Result<(), EgressBootError> {
        let path = self.boot_file(id);
        berth_basics::write_atomically(&path, json, 0o600).map_err(|source| EgressBootError::Io {
            action: "write",
            path,
            source,
        })
    }
}

fn new_placeholder() -> Result<String, EgressBootError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(EgressBootError::Random)?;
    Ok(format!(
        "{PLACEHOLDER_PREFIX}{}",
        berth_basics::hex(&random)
    ))
}

fn load_root(path: &Path) -> Result<CertificateDer<'static>, EgressSetupError> {
    let text = std::fs::read_to_string(path).map_err(|source| EgressSetupError::ReadRoot {
        path: path.to_path_buf(),
        source,
    })?;
    pem::parse_many(&text)
        .ok()
        .and_then(|blocks| blocks.into_iter().find(|b| b.tag() == "CERTIFICATE"))
        .map(|b| CertificateDer::from(b.into_contents()))
        .ok_or_else(|| EgressSetupError::NoCertificate {
            path: path.to_path_buf(),
        })
}

pub mod error;
#[cfg(test)]
mod tests;
