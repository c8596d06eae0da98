//! The daemon's side of egress (ARCHITECTURE.md "Egress"): each box's policy
//! ([`policy`]), and the gateway that serves every running box's egress channel.

pub mod host;
pub mod policy;

pub use host::{
    AuditPage, BootEgress, EgressBootError, EgressHost, EgressSetupError, EgressTask,
    SecretLookupError,
};
pub use policy::{CredentialSpec, EgressPolicy, PolicyError};
