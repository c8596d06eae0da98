//! Runs every seed in `tests/corpus/client_hello/` through the ClientHello parser and checks
//! the outcome its file name states (see the corpus README). The same files seed the
//! `cargo fuzz` target in `crates/egress/fuzz`; this keeps them meaningful on stable.

use std::path::{Path, PathBuf};

use berth_egress::client_hello::{parse_client_hello, HelloError};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/client_hello")
}

/// The error's variant name, e.g. `NoSni` for `HelloError::NoSni`.
fn variant(e: &HelloError) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn every_corpus_file_has_its_stated_outcome() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(corpus_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(stem) = name.strip_suffix(".bin") else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        let outcome = parse_client_hello(&bytes);
        let mut parts = stem.splitn(3, '_');
        let ok = match (parts.next(), parts.next(), &outcome) {
            (Some("ok"), Some(sni), Ok(info)) => info.sni == sni && !info.offers_ech,
            (Some("err"), Some(want), Err(e)) => !e.is_incomplete() && variant(e) == want,
            (Some("incomplete"), _, Err(HelloError::Incomplete { needed })) => {
                *needed > bytes.len()
            }
            (Some("ok" | "err" | "incomplete"), _, _) => false,
            _ => panic!("corpus file {name} does not start with ok_, err_ or incomplete_"),
        };
        if !ok {
            failures.push(format!("{name}: {outcome:?}"));
        }
        // Every prefix of every seed must be handled without a panic, and a prefix of a
        // good hello must ask for more rather than fail.
        for cut in 0..bytes.len() {
            let prefix = parse_client_hello(&bytes[..cut]);
            if stem.starts_with("ok_") && !matches!(prefix, Err(HelloError::Incomplete { .. })) {
                failures.push(format!("{name} cut at {cut}: {prefix:?}"));
                break;
            }
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(checked >= 10, "only {checked} corpus files found");
}
