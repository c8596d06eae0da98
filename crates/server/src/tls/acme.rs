//! Certificates from an ACME CA (Let's Encrypt by default) with `instant-acme`, validated
//! with TLS-ALPN-01 on the API's own listener, so only the one port (443 for a public CA)
//! must be reachable. The account and the certificate live in `<data dir>/acme/` (0700,
//! files 0600) and the certificate is renewed when a third of its lifetime is left.

mod http_client;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::resolver::CertResolver;
use super::{pem_files, TlsError};
use berth_runtime::error_chain;

/// Let's Encrypt's production directory, the default `--acme-directory`.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// The directory inside the data dir.
pub const ACME_DIR: &str = "acme";
const ACCOUNT_FILE: &str = "account.json";
const CERT_FILE: &str = "certificate.json";

/// A failed order is retried after this, doubling up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(30);
const RETRY_MAX: Duration = Duration::from_secs(3600);
/// A valid certificate is looked at again at least this often (a clock jump, a revoked
/// renewal time).
const RECHECK_MAX: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The DNS names the certificate is for (all on this host's listener).
    pub domains: Vec<String>,
    /// The ACME directory URL.
    pub directory: String,
    /// A contact address for the account (expiry warnings).
    pub email: Option<String>,
    /// A PEM root the ACME server's own HTTPS certificate is trusted by, besides the public
    /// web roots (a test CA such as Pebble's).
    pub directory_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME: cannot {step}")]
    Protocol {
        step: &'static str,
        #[source]
        source: instant_acme::Error,
    },
    #[error("ACME: the CA offers no tls-alpn-01 challenge for {domain} (serve on the CA's port 443, or use a reverse proxy)")]
    NoTlsAlpn { domain: String },
    #[error("ACME: the order for {domains:?} ended {status:?} (is this listener reachable on port 443 under those names?)")]
    OrderFailed {
        domains: Vec<String>,
        status: OrderStatus,
    },
    #[error("ACME: the authorization for {domain} is {status:?}")]
    Authorization {
        domain: String,
        status: AuthorizationStatus,
    },
    #[error("ACME: cannot make a key or certificate request")]
    Rcgen(#[from] rcgen::Error),
    #[error("ACME: the CA's certificate cannot be served")]
    Issued,
    #[error("ACME: the stored {} is not valid JSON", path.display())]
    Stored {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("ACME: cannot read the account file {}; restore it from a backup, or remove it to register a new account with the CA", path.display())]
    AccountRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("ACME: the account file {} is damaged; restore it from a backup, or remove it to register a new account with the CA (certificates it got stay valid)", path.display())]
    AccountDamaged {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("ACME: cannot encode the {what} to store it")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("ACME: cannot read the directory CA {}", path.display())]
    DirectoryCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What `<data dir>/acme/account.json` holds: the credentials are read only when they
/// are this directory's.
#[derive(Serialize, Deserialize)]
struct SavedAccount<C> {
    directory: String,
    credentials: C,
}

/// What `<data dir>/acme/certificate.json` holds.
#[derive(Serialize, Deserialize)]
struct StoredCert {
    directory: String,
    domains: Vec<String>,
    chain_pem: String,
    key_pem: String,
}

/// The stored certificate, when it is for this directory and exactly these names.
pub(crate) struct Stored {
    pub certified: Arc<CertifiedKey>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl Stored {
    /// When to renew: with a third of the lifetime left (30 of Let's Encrypt's 90 days).
    fn renew_at(&self) -> OffsetDateTime {
        self.not_after - (self.not_after - self.not_before) / 3
    }
}

/// The directory CA file, if any, must be a readable PEM certificate.
pub(crate) fn check(config: &AcmeConfig) -> Result<(), TlsError> {
    http_client::AcmeHttp::new(config.directory_ca.as_deref()).map(drop)
}

fn sorted(domains: &[String]) -> Vec<String> {
    let mut d: Vec<String> = domains.iter().map(|d| d.to_ascii_lowercase()).collect();
    d.sort();
    d.dedup();
    d
}

pub(crate) fn load_stored(
    config: &AcmeConfig,
    data_dir: &Path,
) -> Result<Option<Stored>, TlsError> {
    let path = data_dir.join(ACME_DIR).join(CERT_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TlsError::Io {
                action: "read",
                path,
                source,
            })
        }
    };
    let stored: StoredCert =
        serde_json::from_slice(&text).map_err(|source| AcmeError::Stored { path, source })?;
    if stored.directory != config.directory || sorted(&stored.domains) != sorted(&config.domains) {
        return Ok(None);
    }
    Ok(parse_issued(&stored.chain_pem, &stored.key_pem))
}

fn parse_issued(chain_pem: &str, key_pem: &str) -> Option<Stored> {
    let chain = pem_files::chain_of(chain_pem.as_bytes())?;
    let (not_before, not_after) = super::der_time::validity(&chain[0])?;
    let key = pem_files::key_of(key_pem.as_bytes())?;
    let certified = pem_files::certified(chain, key).ok()?;
    Some(Stored {
        certified,
        not_before,
        not_after,
    })
}

/// Orders a certificate when there is none or it is due, installs it, and sleeps until the
/// next renewal; failures are logged and retried with a growing pause.
pub async fn maintain(config: AcmeConfig, resolver: Arc<CertResolver>, data_dir: PathBuf) {
    let mut retry = RETRY_FIRST;
    loop {
        let due = match load_stored(&config, &data_dir) {
            Ok(Some(stored)) => stored.renew_at(),
            Ok(None) => OffsetDateTime::now_utc(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "the stored ACME certificate is unreadable; ordering a new one");
                OffsetDateTime::now_utc()
            }
        };
        let wait = due - OffsetDateTime::now_utc();
        if wait.is_positive() {
            let wait = Duration::try_from(wait)
                .unwrap_or(RECHECK_MAX)
                .min(RECHECK_MAX);
            tracing::info!(domains = ?config.domains, renew_in_s = wait.as_secs(), "ACME certificate valid");
            tokio::time::sleep(wait).await;
            continue;
        }
        match issue(&config, &resolver, &data_dir).await {
            Ok(()) => {
                retry = RETRY_FIRST;
                tracing::info!(domains = ?config.domains, "ACME certificate issued and served");
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), retry_in_s = retry.as_secs(), "ACME order failed");
                resolver.clear_challenges();
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    }
}

fn protocol(step: &'static str) -> impl FnOnce(instant_acme::Error) -> TlsError {
    move |source| AcmeError::Protocol { step, source }.into()
}

/// One order: account, TLS-ALPN-01 for every name, finalize, store, serve.
async fn issue(
    config: &AcmeConfig,
    resolver: &CertResolver,
    data_dir: &Path,
) -> Result<(), TlsError> {
    let dir = data_dir.join(ACME_DIR);
    private_dir(&dir)?;
    let account = account(config, &dir).await?;
    let identifiers: Vec<Identifier> = config
        .domains
        .iter()
        .map(|d| Identifier::Dns(d.clone()))
        .collect();
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(protocol("create an order"))?;
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(protocol("fetch an authorization"))?;
        let domain = authz.identifier().to_string();
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            status => return Err(AcmeError::Authorization { domain, status }.into()),
        }
        let mut challenge =
            authz
                .challenge(ChallengeType::TlsAlpn01)
                .ok_or_else(|| AcmeError::NoTlsAlpn {
                    domain: domain.clone(),
                })?;
        let digest = challenge.key_authorization().digest();
        resolver.set_challenge(&domain, challenge_cert(&domain, digest.as_ref())?);
        challenge
            .set_ready()
            .await
            .map_err(protocol("tell the CA a challenge is ready"))?;
    }
    let patience = RetryPolicy::new().timeout(Duration::from_secs(120));
    let status = order
        .poll_ready(&patience)
        .await
        .map_err(protocol("wait for the order"))?;
    resolver.clear_challenges();
    if status != OrderStatus::Ready {
        return Err(AcmeError::OrderFailed {
            domains: config.domains.clone(),
            status,
        }
        .into());
    }
    let key = rcgen::KeyPair::generate().map_err(AcmeError::from)?;
    let mut params =
        rcgen::CertificateParams::new(config.domains.clone()).map_err(AcmeError::from)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params.serialize_request(&key).map_err(AcmeError::from)?;
    order
        .finalize_csr(csr.der())
        .await
        .map_err(protocol("finalize the order"))?;
    let chain_pem = order
        .poll_certificate(&patience)
        .await
        .map_err(protocol("download the certificate"))?;
    let stored = StoredCert {
        directory: config.directory.clone(),
        domains: config.domains.clone(),
        chain_pem,
        key_pem: key.serialize_pem(),
    };
    let issued = parse_issued(&stored.chain_pem, &stored.key_pem).ok_or(AcmeError::Issued)?;
    let encoded = serde_json::to_vec(&stored).map_err(|source| AcmeError::Encode {
        what: "certificate",
        source,
    })?;
    write_private(&dir.join(CERT_FILE), &encoded)?;
    resolver.set(issued.certified);
    super::write_cert_file(resolver, data_dir)
}

/// Checks at start that a stored account can be used: one that cannot be read or parsed
/// stops the daemon rather than being replaced at the next order.
pub(crate) fn check_account(config: &AcmeConfig, data_dir: &Path) -> Result<(), TlsError> {
    stored_account(config, &data_dir.join(ACME_DIR)).map(drop)
}

/// The stored account's credentials for this directory; `None` when there is none yet, or
/// it is another CA's (a new account replaces it). A file that cannot be read or parsed
/// is an error, never replaced: the CA keys its rate limits and issued certificates to
/// the account, and the operator may have a copy to restore.
fn stored_account(config: &AcmeConfig, dir: &Path) -> Result<Option<AccountCredentials>, TlsError> {
    let path = dir.join(ACCOUNT_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(AcmeError::AccountRead { path, source }.into()),
    };
    let damaged = |source| AcmeError::AccountDamaged {
        path: path.clone(),
        source,
    };
    let saved: SavedAccount<serde_json::Value> = serde_json::from_slice(&text).map_err(damaged)?;
    if saved.directory != config.directory {
        tracing::info!(old = %saved.directory, new = %config.directory, "the stored ACME account is another CA's: registering a new one");
        return Ok(None);
    }
    Ok(Some(
        serde_json::from_value(saved.credentials).map_err(damaged)?,
    ))
}

/// The stored account for this directory, else a new one (stored before use).
async fn account(config: &AcmeConfig, dir: &Path) -> Result<Account, TlsError> {
    let http = http_client::AcmeHttp::new(config.directory_ca.as_deref())?;
    let path = dir.join(ACCOUNT_FILE);
    if let Some(credentials) = stored_account(config, dir)? {
        return Account::builder_with_http(Box::new(http))
            .from_credentials(credentials)
            .await
            .map_err(protocol("restore the account"));
    }
    let contact: Vec<String> = config.email.iter().map(|e| format!("mailto:{e}")).collect();
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = Account::builder_with_http(Box::new(http))
        .create(
            &NewAccount {
                contact: &contact,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            config.directory.clone(),
            None,
        )
        .await
        .map_err(protocol("create an account"))?;
    let saved = SavedAccount {
        directory: config.directory.clone(),
        credentials,
    };
    let encoded = serde_json::to_vec(&saved).map_err(|source| AcmeError::Encode {
        what: "account",
        source,
    })?;
    write_private(&path, &encoded)?;
    Ok(account)
}

/// The self-signed certificate RFC 8737 asks for: the name, and the key authorization's
/// digest in a critical acmeIdentifier extension.
fn challenge_cert(domain: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, TlsError> {
    let key = rcgen::KeyPair::generate().map_err(AcmeError::from)?;
    let mut params =
        rcgen::CertificateParams::new(vec![domain.to_owned()]).map_err(AcmeError::from)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(AcmeError::from)?;
    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
    let key = PrivatePkcs8KeyDer::from(key.serialize_der()).into();
    // Not `pem_files::certified`: its key check parses the certificate with webpki, which
    // refuses the critical acmeIdentifier extension this certificate must carry.
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(TlsError::Rustls)?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

fn private_dir(dir: &Path) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        action: "create",
        path: dir.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)
}

/// Writes a file only the daemon's user can read, replacing the old one atomically.
fn write_private(path: &Path, contents: &[u8]) -> Result<(), TlsError> {
    berth_basics::write_atomically(path, contents, 0o600).map_err(|source| TlsError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AcmeConfig {
        AcmeConfig {
            domains: vec!["a.test".into()],
            directory: "https://ca.test/dir".into(),
            email: None,
            directory_ca: None,
        }
    }

    #[test]
    fn an_account_file_that_cannot_be_used_is_an_error_never_replaced() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join(ACME_DIR);
        std::fs::create_dir(&dir).unwrap();
        let account = dir.join(ACCOUNT_FILE);
        // None yet: a new account will be made.
        check_account(&config(), data.path()).unwrap();
        // Another CA's: replaced by this CA's.
        let other = r#"{"directory": "https://other.test/dir", "credentials": {}}"#;
        std::fs::write(&account, other).unwrap();
        check_account(&config(), data.path()).unwrap();
        // Damaged, or not a file it can read: named, with what to do.
        std::fs::write(&account, "{").unwrap();
        let err = check_account(&config(), data.path()).unwrap_err();
        assert!(
            matches!(err, TlsError::Acme(AcmeError::AccountDamaged { .. })),
            "{err}"
        );
        std::fs::remove_file(&account).unwrap();
        std::fs::create_dir(&account).unwrap();
        let err = check_account(&config(), data.path()).unwrap_err();
        assert!(
            matches!(err, TlsError::Acme(AcmeError::AccountRead { .. })),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&account.display().to_string()) && message.contains("restore it"),
            "{message}"
        );
    }

    #[test]
    fn renewal_comes_with_a_third_of_the_lifetime_left() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 4, 1); // 90 days
        let cert = params.self_signed(&key).unwrap();
        let stored = parse_issued(&cert.pem(), &key.serialize_pem()).unwrap();
        let at = stored.renew_at();
        assert_eq!((at.year(), at.month() as u8, at.day()), (2030, 3, 2));
    }
}
