//! Tar archives written byte by byte, for tests that must send what tar libraries refuse
//! to write (`../x`, absolute names, links out of the target).

/// One ustar entry: `kind` is the type flag (`b'0'` file, `b'1'` hard link, `b'2'` symlink,
/// `b'5'` directory), with exactly these name and link bytes (each under 100 bytes).
/// Directories get mode 0755, everything else 0644.
pub fn entry(kind: u8, name: &str, link: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let mode: &[u8] = if kind == b'5' { b"0000755" } else { b"0000644" };
    h[100..107].copy_from_slice(mode);
    h[108..115].copy_from_slice(b"0001751");
    h[116..123].copy_from_slice(b"0001751");
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    h[136..147].copy_from_slice(b"14500000000");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
    out
}

/// The entries, then the end-of-archive blocks.
pub fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = entries.concat();
    out.extend_from_slice(&[0; 1024]);
    out
}

/// Tars that try to write outside their target directory, each with the entry name a
/// refusal must mention. `outside` is a directory beside the target, as the target's
/// sibling named `outside` and by its absolute path `outside_abs`; `planted` is a
/// symlink to it already inside the target.
pub fn attacks(outside_abs: &str) -> Vec<(String, Vec<u8>)> {
    let abs_file = format!("{outside_abs}/abs");
    vec![
        (
            "../outside/x".into(),
            archive(&[entry(b'0', "../outside/x", "", b"evil")]),
        ),
        (
            abs_file.clone(),
            archive(&[entry(b'0', &abs_file, "", b"evil")]),
        ),
        (
            "/etc/x".into(),
            archive(&[entry(b'0', "/etc/x", "", b"evil")]),
        ),
        (
            "evil".into(),
            archive(&[
                entry(b'2', "evil", "../outside", b""),
                entry(b'0', "evil/x", "", b"evil"),
            ]),
        ),
        (
            "abs-link".into(),
            archive(&[entry(b'2', "abs-link", outside_abs, b"")]),
        ),
        (
            "h".into(),
            archive(&[entry(b'1', "h", "../outside/secret", b"")]),
        ),
        (
            "planted/x".into(),
            archive(&[entry(b'0', "planted/x", "", b"evil")]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_carry_a_valid_checksum() {
        let e = entry(b'0', "a", "", b"hi");
        assert_eq!(e.len(), 1024);
        let stored = std::str::from_utf8(&e[148..154]).unwrap();
        let mut h = e[..512].to_vec();
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(u32::from_str_radix(stored, 8).unwrap(), sum);
        assert_eq!(archive(&[e]).len(), 2048);
    }
}
