//! The `node` on `PATH` and its version, written once for the parts that run npm packages
//! (`e2b-npm`, `sdk-typescript`), each with the oldest Node it supports.

use std::process::Command;

/// Checks that `node --version` is `min` (major, minor, patch) or newer; `what` names what
/// needs it, for the reason when it is not.
pub fn require(min: (u32, u32, u32), what: &str) -> Result<(), String> {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("no node on PATH to run {what} with ({e})"))?;
    let text = String::from_utf8_lossy(&node.stdout).trim().to_owned();
    let numbers: Vec<u32> = text
        .trim_start_matches('v')
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    let new_enough = match numbers[..] {
        [major, minor, patch] => (major, minor, patch) >= min,
        _ => false,
    };
    if !new_enough {
        let (major, minor, patch) = min;
        return Err(format!(
            "node {text:?} is older than {what} supports ({major}.{minor}.{patch})"
        ));
    }
    Ok(())
}
