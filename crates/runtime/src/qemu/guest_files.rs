//! The guest's `/etc/hosts` and trust bundle, as text for the config disk (berth-init
//! writes them in the guest). Same content as the sandbox backend binds over its rootfs.

use std::path::Path;

use crate::{EgressSetup, RuntimeError};

/// The host's CA bundle (Debian's `ca-certificates`), the base of every box's trust bundle.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

const HOSTS_HEADER: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
# berth: allowed hosts, pinned to berth-init's egress listener\n";

/// The guest's `/etc/hosts`: localhost, and each pinned name at 127.0.0.1. A name that
/// could break the file's syntax is refused.
pub fn hosts(pinned: &[String]) -> Result<String, RuntimeError> {
    let mut text = HOSTS_HEADER.to_owned();
    for host in pinned {
        let plain = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !plain {
            return Err(RuntimeError::InvalidEgressHost { host: host.clone() });
        }
        text.push_str("127.0.0.1\t");
        text.push_str(host);
        text.push('\n');
    }
    Ok(text)
}

/// The host's CAs plus the box's interception CA.
pub fn ca_bundle(setup: &EgressSetup) -> Result<String, RuntimeError> {
    ca_bundle_from(Path::new(HOST_CA_BUNDLE), setup)
}

fn ca_bundle_from(host_bundle: &Path, setup: &EgressSetup) -> Result<String, RuntimeError> {
    let mut bundle = match std::fs::read_to_string(host_bundle) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(
                "{} is missing (install ca-certificates): boxes trust only their own CA",
                host_bundle.display()
            );
            String::new()
        }
        Err(e) => {
            return Err(RuntimeError::Io {
                action: "read",
                path: host_bundle.to_path_buf(),
                source: e,
            })
        }
    };
    if let Some(pem) = &setup.ca_pem {
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str("# berth: this box's interception CA\n");
        bundle.push_str(pem);
    }
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_pins_each_name_and_refuses_what_would_break_the_file() {
        let text = hosts(&["api.example.test".into()]).unwrap();
        assert!(text.starts_with("127.0.0.1\tlocalhost\n"));
        assert!(text.ends_with("127.0.0.1\tapi.example.test\n"));
        for bad in ["", "a b", "a\n10.0.0.1 evil", "*.x.test"] {
            assert!(hosts(&[bad.into()]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bundle_is_the_host_cas_then_the_box_ca() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host.crt");
        std::fs::write(&host, "HOST CAS").unwrap();
        let setup = EgressSetup {
            pinned_hosts: vec![],
            ca_pem: Some("BOX CA\n".into()),
        };
        assert_eq!(
            ca_bundle_from(&host, &setup).unwrap(),
            "HOST CAS\n# berth: this box's interception CA\nBOX CA\n"
        );
        let none = ca_bundle_from(&dir.path().join("missing"), &EgressSetup::default());
        assert_eq!(none.unwrap(), "");
    }
}
