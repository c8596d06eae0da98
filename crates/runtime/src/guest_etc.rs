//! A box's `/etc/hosts` and trust bundle, the same for every backend: the sandbox binds
//! them read-only over its rootfs, a VM gets them on its config disk (berth-init writes them
//! in the guest).

use std::path::Path;

use crate::error::io;
use crate::{EgressSetup, RuntimeError};

/// The host's CA bundle (Debian's `ca-certificates`), the base of every box's trust bundle.
pub(crate) const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

const HOSTS_HEADER: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
# berth: allowed hosts, pinned to berth-init's egress listener\n";

/// The box's `/etc/hosts`: localhost, and each pinned name at 127.0.0.1. A name that could
/// break the file's syntax is refused (the daemon passes canonical host names only; this is
/// the last line).
pub(crate) fn hosts(pinned: &[String]) -> Result<String, RuntimeError> {
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
pub(crate) fn ca_bundle(setup: &EgressSetup) -> Result<Vec<u8>, RuntimeError> {
    ca_bundle_from(Path::new(HOST_CA_BUNDLE), setup)
}

/// [`ca_bundle`] as text (a VM's config disk is JSON); a host bundle that is not UTF-8
/// cannot be read.
pub(crate) fn ca_bundle_text(setup: &EgressSetup) -> Result<String, RuntimeError> {
    String::from_utf8(ca_bundle(setup)?).map_err(|e| {
        io("read", Path::new(HOST_CA_BUNDLE))(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            e,
        ))
    })
}

fn ca_bundle_from(host_bundle: &Path, setup: &EgressSetup) -> Result<Vec<u8>, RuntimeError> {
    let mut bundle = match std::fs::read(host_bundle) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(
                "{} is missing (install ca-certificates): boxes trust only their own CA",
                host_bundle.display()
            );
            Vec::new()
        }
        Err(e) => return Err(io("read", host_bundle)(e)),
    };
    if let Some(pem) = &setup.ca_pem {
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(b"# berth: this box's interception CA\n");
        bundle.extend_from_slice(pem.as_bytes());
    }
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_pins_each_name_and_refuses_what_would_break_the_file() {
        let text = hosts(&["api.example.test".into(), "b.test".into()]).unwrap();
        assert!(text.starts_with("127.0.0.1\tlocalhost\n"));
        assert!(text.ends_with("127.0.0.1\tapi.example.test\n127.0.0.1\tb.test\n"));
        for bad in ["", "a b", "a\n127.0.0.1 evil", "*.x.test", "a#b"] {
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
            b"HOST CAS\n# berth: this box's interception CA\nBOX CA\n"
        );
        let none = ca_bundle_from(&dir.path().join("missing"), &EgressSetup::default());
        assert_eq!(none.unwrap(), b"");
    }
}
