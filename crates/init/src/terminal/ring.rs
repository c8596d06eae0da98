//! A terminal's output, numbered: the last `cap` bytes are kept, each with its offset
//! since the program started.

use std::collections::VecDeque;

/// The most one push adds (a PTY read).
pub const MAX_PUSH: usize = 64 * 1024;

#[derive(Debug)]
pub struct Ring {
    bytes: VecDeque<u8>,
    /// The offset of `bytes[0]`.
    start: u64,
    cap: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Ring {
            // Allocated once: it never holds more than a read past `cap`, so it never
            // grows (a growing VecDeque doubles: twice the memory the limit says).
            bytes: VecDeque::with_capacity(cap + MAX_PUSH),
            start: 0,
            cap,
        }
    }

    /// Appends, dropping the oldest bytes past the capacity.
    pub fn push(&mut self, data: &[u8]) {
        self.bytes.extend(data);
        let excess = self.bytes.len().saturating_sub(self.cap);
        if excess > 0 {
            self.bytes.drain(..excess);
            self.start += excess as u64;
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// Where a reader asking for `offset` begins: the offset itself, or the oldest byte
    /// kept when it is gone, or the end when it lies in the future.
    pub fn clamp(&self, offset: u64) -> u64 {
        offset.clamp(self.start, self.end())
    }

    /// Up to `max` bytes from `offset` (which [`Ring::clamp`] has placed within the ring).
    pub fn read(&self, offset: u64, max: usize) -> Vec<u8> {
        let from = usize::try_from(self.clamp(offset) - self.start).unwrap_or(usize::MAX);
        self.bytes.range(from..).take(max).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_survive_dropping_the_oldest_bytes() {
        let mut ring = Ring::new(4);
        ring.push(b"abc");
        assert_eq!((ring.start(), ring.end()), (0, 3));
        assert_eq!(ring.read(1, 10), b"bc");
        ring.push(b"def");
        assert_eq!((ring.start(), ring.end()), (2, 6));
        assert_eq!(
            ring.read(0, 10),
            b"cdef",
            "a lost offset starts at the oldest"
        );
        assert_eq!(ring.read(4, 1), b"e");
        assert_eq!(ring.clamp(9), 6);
        assert!(ring.read(6, 10).is_empty());
    }
}
