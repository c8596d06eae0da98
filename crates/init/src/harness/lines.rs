//! Splitting a harness's output into lines without ever buffering a huge one: a line longer
//! than [`MAX_LINE`] is cut to its first [`TRUNCATED_KEEP`] bytes and the rest of it is
//! discarded as it arrives.

/// The longest line kept whole.
pub const MAX_LINE: usize = 1024 * 1024;
/// What is kept of a longer line.
pub const TRUNCATED_KEEP: usize = 4 * 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Full(Vec<u8>),
    /// The first [`TRUNCATED_KEEP`] bytes of a line longer than [`MAX_LINE`].
    Truncated(Vec<u8>),
}

#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
    /// Inside a line already reported as truncated: drop bytes until its newline.
    discarding: bool,
}

impl Splitter {
    /// Feeds one chunk; complete lines go to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<Line>) {
        while !chunk.is_empty() {
            let newline = chunk.iter().position(|&b| b == b'\n');
            let (segment, rest) = match newline {
                Some(i) => (&chunk[..i], &chunk[i + 1..]),
                None => (chunk, &[][..]),
            };
            if !self.discarding {
                self.buf.extend_from_slice(segment);
                if self.buf.len() > MAX_LINE {
                    self.buf.truncate(TRUNCATED_KEEP);
                    out.push(Line::Truncated(std::mem::take(&mut self.buf)));
                    self.discarding = true;
                } else if newline.is_some() {
                    out.push(Line::Full(std::mem::take(&mut self.buf)));
                }
            }
            if newline.is_some() {
                self.discarding = false;
            }
            chunk = rest;
        }
    }

    /// At end of file: a last line without a newline.
    pub fn finish(&mut self, out: &mut Vec<Line>) {
        if !self.discarding && !self.buf.is_empty() {
            out.push(Line::Full(std::mem::take(&mut self.buf)));
        }
        self.buf = Vec::new();
        self.discarding = false;
    }

    /// Bytes held now (never much more than [`MAX_LINE`] plus one chunk).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_across_chunks() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        s.push(b"ab", &mut out);
        s.push(b"c\nd\n\ne", &mut out);
        s.finish(&mut out);
        assert_eq!(
            out,
            [
                Line::Full(b"abc".to_vec()),
                Line::Full(b"d".to_vec()),
                Line::Full(Vec::new()),
                Line::Full(b"e".to_vec())
            ]
        );
    }

    #[test]
    fn a_huge_line_is_truncated_and_never_held_whole() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..160 {
            s.push(&chunk, &mut out);
            assert!(s.held() <= MAX_LINE + chunk.len());
        }
        s.push(b"tail\nnext\n", &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], Line::Truncated(vec![b'x'; TRUNCATED_KEEP]));
        assert_eq!(out[1], Line::Full(b"next".to_vec()));
        // Exactly at the limit is still whole.
        let mut out = Vec::new();
        let mut line = vec![b'y'; MAX_LINE];
        line.push(b'\n');
        s.push(&line, &mut out);
        assert!(matches!(&out[..], [Line::Full(l)] if l.len() == MAX_LINE));
    }
}
