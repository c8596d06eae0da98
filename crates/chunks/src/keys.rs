//! Where each object lives in the store, and the checks on the names keys are built from.
//!
//! ```text
//! chunks/<first 2 hex of the hash>/<hash>        a chunk, zstd-compressed
//! volumes/<volume>/<generation, 20 digits>.json  a manifest (listing sorts by generation)
//! uploads/<random id>                            an upload under way (see markers)
//! gc/<random id>                                 a GC under way (see markers)
//! ```

use crate::ChunkError;

pub(crate) const CHUNKS: &str = "chunks";
pub(crate) const VOLUMES: &str = "volumes";

/// The longest volume name: box ids are about 25 characters.
const VOLUME_MAX_LEN: usize = 128;
/// A sha256 in lowercase hex.
const HASH_LEN: usize = 64;

/// The key of the chunk with `hash` (a sha256 in hex: [`is_hash`] holds for every hash
/// that reaches here; a shorter one would be its own shard).
pub(crate) fn chunk_key(hash: &str) -> String {
    format!("{CHUNKS}/{}/{hash}", hash.get(..2).unwrap_or(hash))
}

pub(crate) fn manifest_key(volume: &str, generation: u64) -> String {
    format!("{VOLUMES}/{volume}/{generation:020}.json")
}

pub(crate) fn volume_prefix(volume: &str) -> String {
    format!("{VOLUMES}/{volume}")
}

/// The volume and generation of a manifest's key; None for any other key.
pub(crate) fn parse_manifest_key(key: &str) -> Option<(&str, u64)> {
    let rest = key.strip_prefix(VOLUMES)?.strip_prefix('/')?;
    let (volume, file) = rest.split_once('/')?;
    let digits = file.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    check_volume(volume).ok()?;
    Some((volume, digits.parse().ok()?))
}

/// The hash of a chunk's key; None for any other key.
pub(crate) fn parse_chunk_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(CHUNKS)?.strip_prefix('/')?;
    let (shard, hash) = rest.split_once('/')?;
    (is_hash(hash) && hash.starts_with(shard) && shard.len() == 2).then_some(hash)
}

/// A sha256 as lowercase hex, the only form a manifest or a chunk's key holds.
pub(crate) fn is_hash(text: &str) -> bool {
    text.len() == HASH_LEN && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Refuses a volume name that could step out of its key (`/`, `..`) or is not a plain
/// name: ASCII letters, digits, `_`, `-` and `.`, not starting with `.`, at most 128.
pub fn check_volume(volume: &str) -> Result<(), ChunkError> {
    let bad = |why| {
        Err(ChunkError::BadVolume {
            volume: volume.chars().take(VOLUME_MAX_LEN + 8).collect(),
            why,
        })
    };
    if volume.is_empty() {
        return bad("it is empty");
    }
    if volume.len() > VOLUME_MAX_LEN {
        return bad("it is longer than 128 bytes");
    }
    if volume.starts_with('.') {
        return bad("it starts with `.` (`..` would leave its key)");
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if !volume.chars().all(plain) {
        return bad("it has a character other than ASCII letters, digits, `_`, `-` and `.`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "ab12000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn keys_have_the_documented_layout_and_parse_back() {
        assert_eq!(chunk_key(HASH), format!("chunks/ab/{HASH}"));
        assert_eq!(parse_chunk_key(&chunk_key(HASH)), Some(HASH));
        let key = manifest_key("bx_lfae627hy7e4uonnf6p5", 42);
        assert_eq!(
            key,
            "volumes/bx_lfae627hy7e4uonnf6p5/00000000000000000042.json"
        );
        assert_eq!(
            parse_manifest_key(&key),
            Some(("bx_lfae627hy7e4uonnf6p5", 42))
        );
        assert_eq!(
            parse_manifest_key(&manifest_key("v", u64::MAX)),
            Some(("v", u64::MAX))
        );
    }

    #[test]
    fn manifest_keys_sort_by_generation() {
        let mut keys: Vec<String> = [10, 9, 100, 0].map(|g| manifest_key("v", g)).into();
        keys.sort();
        let generations: Vec<u64> = keys
            .iter()
            .map(|k| parse_manifest_key(k).unwrap().1)
            .collect();
        assert_eq!(generations, [0, 9, 10, 100]);
    }

    #[test]
    fn other_keys_are_not_taken_for_chunks_or_manifests() {
        for key in [
            "chunks/ab",
            "chunks/cd/".to_owned().as_str(),
            &format!("chunks/cd/{HASH}"),
            &format!("chunks/ab/{}", HASH.to_uppercase()),
            &format!("chunks/ab/{HASH}.tmp"),
        ] {
            assert_eq!(parse_chunk_key(key), None, "{key}");
        }
        for key in [
            "volumes/v/42.json",
            "volumes/v/00000000000000000042.json.tmp",
            "volumes/../00000000000000000042.json",
            "volumes/v/w/00000000000000000042.json",
            "uploads/00000000000000000042.json",
        ] {
            assert_eq!(parse_manifest_key(key), None, "{key}");
        }
    }

    #[test]
    fn volume_names_that_could_leave_their_key_are_refused() {
        check_volume("bx_lfae627hy7e4uonnf6p5").unwrap();
        check_volume("a.b-c_D9").unwrap();
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a b",
            "é",
            &"x".repeat(129),
        ] {
            let err = check_volume(bad).unwrap_err();
            assert!(
                matches!(err, ChunkError::BadVolume { .. }),
                "{bad:?}: {err}"
            );
        }
    }
}
