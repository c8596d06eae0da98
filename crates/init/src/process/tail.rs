//! A process's output, numbered: the chunks of stdout and stderr in the order they came,
//! each with its offset, the last `cap` bytes of them kept.

use std::collections::VecDeque;

use berth_protocol::process::OutputStream;

#[derive(Debug)]
pub struct Tail {
    chunks: VecDeque<Chunk>,
    held: usize,
    end: u64,
    cap: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub stream: OutputStream,
    pub offset: u64,
    pub data: Vec<u8>,
}

impl Tail {
    pub fn new(cap: usize) -> Self {
        Tail {
            chunks: VecDeque::new(),
            held: 0,
            end: 0,
            cap,
        }
    }

    /// Appends a chunk, dropping the oldest whole chunks past the capacity.
    pub fn push(&mut self, stream: OutputStream, data: &[u8]) {
        self.chunks.push_back(Chunk {
            stream,
            offset: self.end,
            data: data.to_vec(),
        });
        self.held += data.len();
        self.end += data.len() as u64;
        while self.held > self.cap {
            match self.chunks.pop_front() {
                Some(old) => self.held -= old.data.len(),
                None => break,
            }
        }
    }

    pub fn end(&self) -> u64 {
        self.end
    }

    /// The last `max_bytes` kept, both streams in the order they came.
    pub fn last_bytes(&self, max_bytes: usize) -> Vec<u8> {
        let from = self.end.saturating_sub(max_bytes as u64);
        self.from(from, usize::MAX)
            .into_iter()
            .flat_map(|chunk| chunk.data)
            .collect()
    }

    /// The output from `offset` on, as kept: a chunk that `offset` falls inside is cut to
    /// start there; an `offset` no longer kept starts at the oldest chunk (its offset shows
    /// the gap). At most `max_bytes` (whole chunks, at least one).
    pub fn from(&self, offset: u64, max_bytes: usize) -> Vec<Chunk> {
        let mut out = Vec::new();
        let mut taken = 0;
        for chunk in &self.chunks {
            let chunk_end = chunk.offset + chunk.data.len() as u64;
            if chunk_end <= offset {
                continue;
            }
            if !out.is_empty() && taken + chunk.data.len() > max_bytes {
                break;
            }
            let skip = usize::try_from(offset.saturating_sub(chunk.offset)).unwrap_or(0);
            taken += chunk.data.len() - skip;
            out.push(Chunk {
                stream: chunk.stream,
                offset: chunk.offset + skip as u64,
                data: chunk.data[skip..].to_vec(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_resumes_at_an_offset_and_shows_what_was_dropped() {
        let mut tail = Tail::new(6);
        tail.push(OutputStream::Stdout, b"abc");
        tail.push(OutputStream::Stderr, b"de");
        let from_one = tail.from(1, 100);
        assert_eq!(from_one.len(), 2);
        assert_eq!((from_one[0].offset, &from_one[0].data[..]), (1, &b"bc"[..]));
        assert_eq!(from_one[1].stream, OutputStream::Stderr);
        tail.push(OutputStream::Stdout, b"fgh");
        // "abc" is gone: 8 bytes came, 6 are kept in whole chunks (5 here).
        assert_eq!(tail.end(), 8);
        let from_zero = tail.from(0, 100);
        assert_eq!(from_zero[0].offset, 3, "the gap shows in the offset");
        assert!(tail.from(8, 100).is_empty());
        assert_eq!(
            tail.from(0, 1).len(),
            1,
            "at least one chunk, then the bound"
        );
        assert_eq!(tail.last_bytes(4), b"efgh");
        assert_eq!(tail.last_bytes(100), b"defgh", "only what is kept");
    }
}
