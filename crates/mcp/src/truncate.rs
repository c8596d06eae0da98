//! Cutting output to a model's size: keep the start (and, for a command's output, the end,
//! where errors and summaries land), count what was dropped, and say so in the text.

/// Bytes kept from a stream of unknown length: the first `head` and the last `tail`; what
/// lies between is counted, never held, so any amount of output costs `head + tail` bytes.
#[derive(Debug)]
pub struct HeadTail {
    head_max: usize,
    tail_max: usize,
    head: Vec<u8>,
    /// The newest bytes past the head, at most `2 * tail_max` (compacted to `tail_max`).
    tail: Vec<u8>,
    total: u64,
}

impl HeadTail {
    pub fn new(head_max: usize, tail_max: usize) -> HeadTail {
        HeadTail {
            head_max,
            tail_max,
            head: Vec::new(),
            tail: Vec::new(),
            total: 0,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_max - self.head.len();
        if room > 0 {
            let taken = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
        }
        if self.tail_max == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_max {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.tail_max..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        // Compact only once it doubled: each byte is moved at most once on average.
        if self.tail.len() >= 2 * self.tail_max {
            let cut = self.tail.len() - self.tail_max;
            self.tail.drain(..cut);
        }
    }

    /// Every byte seen.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The text kept (UTF-8, lossy), with `[… N bytes left out …]` where the middle was cut.
    pub fn render(&self) -> String {
        let tail_start = self.tail.len().saturating_sub(self.tail_max);
        let tail = &self.tail[tail_start..];
        let kept = (self.head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if kept < self.total {
            text.push_str(&format!("\n[… {} bytes left out …]\n", self.total - kept));
        }
        text.push_str(&String::from_utf8_lossy(tail));
        text
    }

    pub fn is_cut(&self) -> bool {
        ((self.head.len() + self.tail.len().min(self.tail_max)) as u64) < self.total
    }
}

/// `text` cut to at most `max` bytes at a character boundary; `None` when it fits.
pub fn cut(text: &str, max: usize) -> Option<&str> {
    if text.len() <= max {
        return None;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(&text[..end])
}

/// `text` whole, or its first `max` bytes and a note of how many were left out.
pub fn with_note(text: &str, max: usize, how_to_get_the_rest: &str) -> String {
    match cut(text, max) {
        None => text.to_owned(),
        Some(kept) => format!(
            "{kept}\n[… {} more bytes left out; {how_to_get_the_rest}]",
            text.len() - kept.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut out = HeadTail::new(8, 4);
        out.push(b"hello");
        out.push(b" you");
        assert_eq!(out.render(), "hello you");
        assert!(!out.is_cut());
        assert_eq!(out.total(), 9);
    }

    #[test]
    fn long_output_keeps_its_start_and_end_and_counts_the_middle() {
        let mut out = HeadTail::new(4, 3);
        for chunk in [&b"abcdef"[..], b"ghij", b"k", b"lmnopqrstu", b"vwxyz"] {
            out.push(chunk);
        }
        assert!(out.is_cut());
        assert_eq!(out.total(), 26);
        assert_eq!(out.render(), "abcd\n[… 19 bytes left out …]\nxyz");
    }

    #[test]
    fn memory_stays_bounded_whatever_the_amount() {
        let mut out = HeadTail::new(16, 16);
        for _ in 0..100_000 {
            out.push(b"0123456789");
        }
        assert!(
            out.head.len() <= 16 && out.tail.len() < 32,
            "{}",
            out.tail.len()
        );
        assert_eq!(out.total(), 1_000_000);
        assert!(out.render().contains("999968 bytes left out"));
    }

    #[test]
    fn a_head_only_collector_drops_the_rest() {
        let mut out = HeadTail::new(3, 0);
        out.push(b"abcdef");
        assert_eq!(out.render(), "abc\n[… 3 bytes left out …]\n");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(cut("héllo", 2), Some("h"));
        assert_eq!(cut("hello", 5), None);
        let noted = with_note("héllo wörld", 3, "ask again");
        assert_eq!(noted, "hé\n[… 10 more bytes left out; ask again]");
        assert_eq!(with_note("hi", 4, "x"), "hi");
    }
}
