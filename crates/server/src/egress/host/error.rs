//! What setting up the egress gateway, or one box's egress at its boot, can fail with (its
//! own file so that `crate::error` takes these without taking the gateway).

use std::path::PathBuf;

use berth_egress::gateway::{AuditError, GatewayError};
use berth_egress::intercept::{CaError, InterceptSetupError, RuleError};

#[derive(Debug, thiserror::Error)]
pub enum EgressSetupError {
    #[error("reading the extra root {}", path.display())]
    ReadRoot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the extra root {} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("the extra root {} is not a usable CA certificate", path.display())]
    BadRoot {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("preparing the audit log")]
    Audit(#[source] AuditError),
    #[error("[egress] resolve_overrides")]
    Gateway(#[source] GatewayError),
    #[error("creating {}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum EgressBootError {
    #[error("the secret {name:?} of a credential rule is not set: set it with `berth secret set {name}` (or POST /v1/secrets), then start the box again")]
    MissingSecret { name: String },
    #[error("reading the secret {name:?}")]
    Secret {
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("making the box's CA")]
    Ca(#[source] CaError),
    #[error(transparent)]
    Rule(RuleError),
    #[error("preparing TLS interception")]
    Intercept(#[source] InterceptSetupError),
    #[error("the random source failed")]
    Random(#[source] getrandom::Error),
    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the saved egress state {} holds an invalid policy", path.display())]
    SavedPolicy {
        path: PathBuf,
        #[source]
        source: crate::egress::policy::PolicyError,
    },
    #[error("the saved egress state {} is damaged", path.display())]
    Saved {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}
