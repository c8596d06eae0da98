//! The cluster's certificate authority: one ECDSA P-256 key and a self-signed certificate,
//! `ca.crt` and `ca.key` in a directory only the API replicas hold. It signs two kinds of
//! leaf certificates, told apart by a URI in their subject alternative names:
//!
//! - a node's, `berth://node/<name>`, plus the DNS name [`NODE_SERVER_NAME`] that every
//!   node answers to (nodes are dialled by address, so the chain is checked against that
//!   fixed name and the node's identity against the URI);
//! - an API replica's, `berth://api/<replica>`, which a replica makes for itself at start.
//!
//! A node sends a certificate signing request; the CA takes only the public key from it
//! (proven by the request's signature) and writes every other field itself, so a request
//! that asks for more (a CA bit, another name) gets exactly what the CA decided.

use std::io::{Read as _, Write as _};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData,
    SanType, SerialNumber,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use time::{Duration, OffsetDateTime};

use super::error::{ClusterError, PemOrigin};

pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";

/// The DNS name in every node's certificate, which the API checks chains against.
pub const NODE_SERVER_NAME: &str = "node.berth.internal";

/// How long the CA and the certificates it signs are valid. A leaf is back-dated by
/// [`CLOCK_SKEW`] so a host whose clock is a little behind the CA's accepts it at once.
const CA_VALIDITY: Duration = Duration::days(3650);
const LEAF_VALIDITY: Duration = Duration::days(365);
const CLOCK_SKEW: Duration = Duration::hours(1);

const CA_COMMON_NAME: &str = "berth cluster CA";
const URI_PREFIX: &str = "berth://";

/// Longest node or replica name: a fully qualified host name.
const MAX_NAME_CHARS: usize = 253;
/// A CSR for a P-256 key is under 1 KiB; an RSA-4096 one under 4 KiB.
pub const MAX_CSR_BYTES: usize = 16 * 1024;

/// What a leaf certificate lets its holder be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A `berth node`: serves the box API to the API replicas.
    Node { node_name: String },
    /// A `berth up --role api` replica: calls the nodes.
    Api { replica: String },
}

impl Role {
    /// `berth://node/<name>` or `berth://api/<replica>`.
    pub fn uri(&self) -> String {
        match self {
            Role::Node { node_name } => format!("{URI_PREFIX}node/{node_name}"),
            Role::Api { replica } => format!("{URI_PREFIX}api/{replica}"),
        }
    }

    /// The role a `berth://` URI names; `None` for anything else (a name that would not
    /// pass [`check_name`] included, so a URI cannot smuggle a path).
    pub fn from_uri(uri: &str) -> Option<Role> {
        let rest = uri.strip_prefix(URI_PREFIX)?;
        let (kind, name) = rest.split_once('/')?;
        check_name("peer", name).ok()?;
        match kind {
            "node" => Some(Role::Node {
                node_name: name.to_owned(),
            }),
            "api" => Some(Role::Api {
                replica: name.to_owned(),
            }),
            _ => None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Role::Node { .. } => "node",
            Role::Api { .. } => "API replica",
        }
    }

    fn name(&self) -> &str {
        match self {
            Role::Node { node_name } => node_name,
            Role::Api { replica } => replica,
        }
    }
}

/// Refuses a node or replica name that could not stand in a URI path segment as is.
pub fn check_name(role: &'static str, name: &str) -> Result<(), ClusterError> {
    let invalid = |rule| ClusterError::InvalidName {
        role,
        name: name.to_owned(),
        rule,
    };
    if name.is_empty() || name.len() > MAX_NAME_CHARS {
        return Err(invalid("it must be 1 to 253 characters"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(invalid("it must start with a letter or a digit"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        return Err(invalid(
            "only letters, digits, '.', '-' and '_' are allowed",
        ));
    }
    Ok(())
}

/// The `berth://` URIs among a certificate's subject alternative names.
pub fn berth_uris(cert: &CertificateDer<'_>) -> Option<Vec<String>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let names = match parsed.subject_alternative_name().ok()? {
        Some(san) => san
            .value
            .general_names
            .iter()
            .filter_map(|name| match name {
                x509_parser::extensions::GeneralName::URI(uri) if uri.starts_with(URI_PREFIX) => {
                    Some((*uri).to_owned())
                }
                _ => None,
            })
            .collect(),
        None => Vec::new(),
    };
    Some(names)
}

/// The one role a certificate names; `None` when it names none, or more than one.
pub fn role_of(cert: &CertificateDer<'_>) -> Option<Role> {
    match berth_uris(cert)?.as_slice() {
        [uri] => Role::from_uri(uri),
        _ => None,
    }
}

/// The cluster's CA, loaded with its key: held by the API replicas only.
pub struct ClusterCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// Makes a new CA in `dir` (created `0700` if missing): `ca.key` (`0600`) and `ca.crt`.
    /// Refuses when either file exists: replacing a CA cuts off every node that joined.
    pub fn init(dir: &Path) -> Result<ClusterCa, ClusterError> {
        let key_path = dir.join(CA_KEY_FILE);
        let cert_path = dir.join(CA_CERT_FILE);
        if key_path.exists() || cert_path.exists() {
            return Err(ClusterError::CaExists {
                dir: dir.to_owned(),
            });
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("create", dir))?;

        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
            ClusterError::Certificate {
                action: "generate the CA's key",
                source,
            }
        })?;
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(CA_COMMON_NAME);
        // A name of this cluster's own: another cluster's certificate is then an unknown
        // issuer, not a bad signature by a CA of the same name.
        let mut cluster_id = [0u8; 8];
        getrandom::fill(&mut cluster_id).map_err(ClusterError::Random)?;
        params.distinguished_name.push(
            DnType::OrganizationName,
            format!("berth cluster {}", berth_basics::hex(&cluster_id)),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(random_serial()?);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - CLOCK_SKEW;
        params.not_after = now + CA_VALIDITY;
        let cert = params
            .self_signed(&key)
            .map_err(|source| ClusterError::Certificate {
                action: "sign the CA's certificate",
                source,
            })?;

        // The key first, and never over a file that appeared meanwhile (`create_new`).
        create_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
        if let Err(e) = create_new(&cert_path, cert.pem().as_bytes(), 0o644) {
            let _ = std::fs::remove_file(&key_path);
            return Err(e);
        }
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads the CA in `dir`. The key must be readable by its owner only.
    pub fn load(dir: &Path) -> Result<ClusterCa, ClusterError> {
        let key_path = dir.join(CA_KEY_FILE);
        let cert_path = dir.join(CA_CERT_FILE);
        if !key_path.exists() && !cert_path.exists() {
            return Err(ClusterError::CaMissing {
                dir: dir.to_owned(),
            });
        }
        let key_pem = read_private(&key_path)?;
        let cert_pem = read_file(&cert_path)?;
        let key_origin = PemOrigin::File(key_path);
        let cert_origin = PemOrigin::File(cert_path);
        let key = key_of(&key_pem, key_origin.clone())?;
        let cert_der = cert_of(&cert_pem, cert_origin.clone())?;
        check_pair(&key, &cert_der, key_origin, cert_origin.clone())?;
        let issuer =
            Issuer::from_ca_cert_der(&cert_der, key).map_err(|_| ClusterError::BadCert {
                origin: cert_origin,
            })?;
        Ok(ClusterCa { cert_pem, issuer })
    }

    /// The CA's certificate, which every node and replica trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Signs the key of `csr` for `role`; returns the certificate, PEM. `hosts` (IP
    /// addresses or DNS names a node is also reached by) are added as names; nothing else
    /// of the request is used.
    pub fn issue(&self, role: &Role, csr: &Csr, hosts: &[&str]) -> Result<String, ClusterError> {
        self.sign(role, &csr.0, hosts)
    }

    /// A key and certificate for the API replica `replica`, made at its start: the API
    /// holds the CA key, so no request travels.
    pub fn self_issue_api(&self, replica: &str) -> Result<Identity, ClusterError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
            ClusterError::Certificate {
                action: "generate an API replica's key",
                source,
            }
        })?;
        let role = Role::Api {
            replica: replica.to_owned(),
        };
        let cert_pem = self.sign(&role, &key, &[])?;
        Ok(Identity {
            key_pem: key.serialize_pem(),
            cert_pem,
            ca_pem: self.cert_pem.clone(),
        })
    }

    fn sign(
        &self,
        role: &Role,
        public_key: &impl PublicKeyData,
        hosts: &[&str],
    ) -> Result<String, ClusterError> {
        check_name(role.kind(), role.name())?;
        let bad_name = |source| ClusterError::Certificate {
            action: "put a name in a certificate",
            source,
        };
        let mut names = vec![SanType::URI(role.uri().try_into().map_err(bad_name)?)];
        if let Role::Node { .. } = role {
            names.push(SanType::DnsName(
                NODE_SERVER_NAME.try_into().map_err(bad_name)?,
            ));
        }
        for host in hosts {
            names.push(match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => {
                    check_name("host", host)?;
                    SanType::DnsName((*host).try_into().map_err(bad_name)?)
                }
            });
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(&format!("berth {} {}", role.kind(), role.name()));
        params.subject_alt_names = names;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial()?);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - CLOCK_SKEW;
        params.not_after = now + LEAF_VALIDITY;
        let cert = params
            .signed_by(public_key, &self.issuer)
            .map_err(|source| ClusterError::Certificate {
                action: "sign a certificate",
                source,
            })?;
        Ok(cert.pem())
    }
}

/// A certificate signing request whose signature was checked: proof that its sender holds
/// the key. Only that key is used.
#[derive(Debug, Clone)]
pub struct Csr(rcgen::PublicKey);

impl Csr {
    /// Parses a PEM `CERTIFICATE REQUEST` and checks it is signed by its own key.
    pub fn from_pem(pem: &str) -> Result<Csr, ClusterError> {
        if pem.len() > MAX_CSR_BYTES {
            return Err(ClusterError::CsrTooLarge {
                bytes: pem.len(),
                max: MAX_CSR_BYTES,
            });
        }
        CertificateSigningRequestParams::from_pem(pem)
            .map(|csr| Csr(csr.public_key))
            .map_err(|source| ClusterError::BadCsr { source })
    }
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn
}

/// 127 random bits: a serial of its own for each certificate (rcgen would derive it from
/// the public key, the same for two certificates of one key).
fn random_serial() -> Result<SerialNumber, ClusterError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(ClusterError::Random)?;
    // Positive, and as long as it looks.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.to_owned();
    move |source| ClusterError::Io {
        action,
        path,
        source,
    }
}

pub(crate) fn read_file(path: &Path) -> Result<String, ClusterError> {
    std::fs::read_to_string(path).map_err(io("read", path))
}

/// Reads a private key file, refusing one that others may read or write: the mode is
/// checked on the file as opened, so a swap between the check and the read changes nothing.
pub(crate) fn read_private(path: &Path) -> Result<String, ClusterError> {
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let mode = file
        .metadata()
        .map_err(io("read the mode of", path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ClusterError::KeyNotPrivate {
            path: path.to_owned(),
            mode: mode & 0o7777,
        });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io("read", path))?;
    Ok(text)
}

/// Writes a file that must not exist yet, with `mode` whatever the umask.
fn create_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ClusterError> {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .and_then(|mut file| {
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            file.write_all(bytes)?;
            file.sync_all()
        });
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(ClusterError::CaExists {
            dir: path.parent().map_or_else(PathBuf::new, Path::to_owned),
        }),
        Err(source) => Err(ClusterError::Io {
            action: "write",
            path: path.to_owned(),
            source,
        }),
    }
}

pub(crate) fn key_of(pem: &str, origin: PemOrigin) -> Result<KeyPair, ClusterError> {
    KeyPair::from_pem(pem).map_err(|source| ClusterError::BadKey { origin, source })
}

/// The first certificate of a PEM text.
pub(crate) fn cert_of(
    pem: &str,
    origin: PemOrigin,
) -> Result<CertificateDer<'static>, ClusterError> {
    let der =
        CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|source| ClusterError::NoPem {
            origin: origin.clone(),
            expected: "CERTIFICATE",
            source,
        })?;
    x509_parser::parse_x509_certificate(&der).map_err(|_| ClusterError::BadCert { origin })?;
    Ok(der)
}

/// Refuses a key that is not the certificate's.
pub(crate) fn check_pair(
    key: &KeyPair,
    cert: &CertificateDer<'_>,
    key_origin: PemOrigin,
    cert_origin: PemOrigin,
) -> Result<(), ClusterError> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert).map_err(|_| ClusterError::BadCert {
            origin: cert_origin.clone(),
        })?;
    if parsed.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err(ClusterError::KeyMismatch {
            key: key_origin,
            cert: cert_origin,
        });
    }
    Ok(())
}

/// What one end of a cluster connection presents and trusts, as PEM.
#[derive(Clone)]
pub struct Identity {
    /// PKCS#8.
    pub key_pem: String,
    pub cert_pem: String,
    /// The cluster CA's certificate: the only one trusted.
    pub ca_pem: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl AsRef<Identity> for Identity {
    fn as_ref(&self) -> &Identity {
        self
    }
}
