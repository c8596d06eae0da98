//! Which part of a file is indexed as text. Memory is markdown; anything else an agent keeps
//! there (an image, a sqlite file) is indexed by its path only, so it still shows in
//! `files()` and the graph.

/// The most of one file that is indexed (and stored for snippets); the rest is ignored.
pub const MAX_INDEXED_BYTES: usize = 1 << 20;

/// A NUL in this many leading bytes marks a binary file, as git and grep decide.
const BINARY_SNIFF_BYTES: usize = 8 << 10;

/// The indexable text of a file's content: its first [`MAX_INDEXED_BYTES`] when they are
/// UTF-8 without NUL near the start, else None. A character cut by the cap is dropped.
pub(crate) fn indexable_text(content: &[u8]) -> Option<&str> {
    let sniff = &content[..content.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return None;
    }
    let capped = &content[..content.len().min(MAX_INDEXED_BYTES)];
    match std::str::from_utf8(capped) {
        Ok(text) => Some(text),
        // Cut mid-character by the cap: the bytes up to it are the text.
        Err(err) if err.error_len().is_none() && capped.len() < content.len() => {
            std::str::from_utf8(&capped[..err.valid_up_to()]).ok()
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_kept_whole() {
        assert_eq!(indexable_text("Zoë's café".as_bytes()), Some("Zoë's café"));
        assert_eq!(indexable_text(b""), Some(""));
    }

    #[test]
    fn binary_and_invalid_utf8_are_not_text() {
        assert_eq!(indexable_text(b"PNG\0\x01"), None);
        assert_eq!(indexable_text(b"caf\xe9"), None);
        // Truncated inside a character at the end of the file: not UTF-8.
        assert_eq!(indexable_text(&"é".as_bytes()[..1]), None);
    }

    #[test]
    fn a_nul_after_the_sniffed_bytes_is_text() {
        let mut content = vec![b'a'; BINARY_SNIFF_BYTES];
        content.push(0);
        assert!(indexable_text(&content).is_some());
    }

    #[test]
    fn the_cap_cuts_at_a_character_boundary() {
        let mut content = vec![b'a'; MAX_INDEXED_BYTES - 1];
        content.extend_from_slice("é and more".as_bytes());
        let text = indexable_text(&content).unwrap();
        assert_eq!(text.len(), MAX_INDEXED_BYTES - 1);
        assert!(text.bytes().all(|b| b == b'a'));

        // Past the cap, invalid bytes are ignored.
        let mut content = vec![b'b'; MAX_INDEXED_BYTES];
        content.push(0xff);
        assert_eq!(
            indexable_text(&content).map(str::len),
            Some(MAX_INDEXED_BYTES)
        );
    }
}
