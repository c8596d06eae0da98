//! Fuzzes the gateway's pure input checks: the ClientHello parser on arbitrary bytes (as
//! they would arrive from a box), and the host name canonicaliser on arbitrary text.
//! Neither may panic; a successful parse must be self-consistent.

#![no_main]

use berth_egress::client_hello::{parse_client_hello, HelloError, MAX_CLIENT_HELLO_BYTES};
use berth_egress::hostname::canonical_host;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_client_hello(data) {
        Ok(info) => {
            // The SNI is canonical: canonicalising again changes nothing.
            assert_eq!(
                canonical_host(&info.sni).ok().as_deref(),
                Some(info.sni.as_str())
            );
            assert!(!info.offers_ech);
        }
        Err(HelloError::Incomplete { needed }) => {
            // Asking for more must make progress and stay under the cap.
            assert!(needed > data.len());
            assert!(needed <= MAX_CLIENT_HELLO_BYTES);
        }
        Err(_) => {}
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(host) = canonical_host(text) {
            assert_eq!(canonical_host(&host).ok().as_deref(), Some(host.as_str()));
            assert!(host.len() <= 253);
        }
    }
});
