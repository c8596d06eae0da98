//! Taking the real secrets back out of what an intercepted host answers: an upstream that
//! echoes request headers (httpbin's `/headers`, a debug endpoint, an error message that
//! quotes the request) would otherwise hand the box the secret the gateway set. Every
//! response header value and every body byte relayed to the box passes through here.
//!
//! Streaming-safe: a secret split across reads is caught because the scrubber holds back
//! the end of a piece only while it could still be the start of a secret (the longest
//! suffix that is a proper prefix of one). Nothing else is held, so an event stream whose
//! events end in `\n\n` flows on at once.

use memchr::memmem;

use super::rules::CredentialRule;

/// One form a secret may come back in, and what the box sees instead.
#[derive(Clone)]
struct Needle {
    secret: Vec<u8>,
    placeholder: Vec<u8>,
}

/// The forms of every secret of one box's rules. `Debug` shows only how many.
#[derive(Clone, Default)]
pub struct Secrets {
    needles: Vec<Needle>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("forms", &self.needles.len())
            .finish()
    }
}

impl Secrets {
    /// The forms an echo returns: the value as set or, for an `authorization`-style value
    /// (`Bearer tok`), the credential after the scheme (so a service that parses the header
    /// and quotes only the token is caught too); and that JSON-escaped where it differs
    /// (`/` → `\/`, `"` → `\"`, `\` → `\\`, as JSON encoders write them).
    pub fn new(rules: &[CredentialRule]) -> Secrets {
        let mut needles: Vec<Needle> = Vec::new();
        for rule in rules {
            // The token alone also covers `Bearer tok`, which becomes `Bearer <placeholder>`:
            // what the box sent.
            let secret = credential_part(&rule.secret);
            let placeholder = rule.placeholder.as_str();
            {
                let raw = (secret.as_bytes().to_vec(), placeholder.as_bytes().to_vec());
                let json = (json_escaped(secret), json_escaped(placeholder));
                for (secret, placeholder) in [raw, json] {
                    if !secret.is_empty() && !needles.iter().any(|n| n.secret == secret) {
                        needles.push(Needle {
                            secret,
                            placeholder,
                        });
                    }
                }
            }
        }
        // Longest first: where a full value and its token both match, the full value wins.
        needles.sort_by_key(|n| std::cmp::Reverse(n.secret.len()));
        Secrets { needles }
    }

    /// A whole value (a header): every secret in it replaced.
    pub fn replace_all(&self, value: &[u8]) -> Vec<u8> {
        let mut stream = self.stream();
        let mut out = Vec::with_capacity(value.len());
        stream.push(value, &mut out);
        stream.finish(&mut out);
        out
    }

    /// A scrubber for one body.
    pub fn stream(&self) -> Scrub<'_> {
        Scrub {
            secrets: self,
            held: Vec::new(),
        }
    }
}

/// One body being scrubbed, piece by piece.
pub struct Scrub<'a> {
    secrets: &'a Secrets,
    /// The end of the last piece that may be the start of a secret.
    held: Vec<u8>,
}

impl Scrub<'_> {
    /// Appends to `out` everything of `piece` (after what was held) that can no longer be
    /// part of a secret, with each secret replaced.
    pub fn push(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(piece);
        let done = self.replace(&data, out);
        let keep = self.open_prefix(&data[done..]);
        out.extend_from_slice(&data[done..data.len() - keep]);
        self.held = data[data.len() - keep..].to_vec();
    }

    /// The body has ended: what was held cannot become a secret any more.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
    }

    /// Copies `data` to `out` with every complete secret replaced, up to the end of the
    /// last one; returns where that copy stopped.
    fn replace(&self, data: &[u8], out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        loop {
            // The earliest match from `at`; the longest at that position (needles are
            // sorted longest first and `min_by_key` keeps the first of equals).
            let next = self
                .secrets
                .needles
                .iter()
                .filter_map(|n| memmem::find(&data[at..], &n.secret).map(|i| (at + i, n)))
                .min_by_key(|(i, _)| *i);
            let Some((start, needle)) = next else {
                return at;
            };
            out.extend_from_slice(&data[at..start]);
            out.extend_from_slice(&needle.placeholder);
            at = start + needle.secret.len();
        }
    }

    /// How many bytes at the end of `rest` are a proper prefix of some secret.
    fn open_prefix(&self, rest: &[u8]) -> usize {
        self.secrets
            .needles
            .iter()
            .map(|n| {
                let longest = (n.secret.len() - 1).min(rest.len());
                (1..=longest)
                    .rev()
                    .find(|&k| rest.ends_with(&n.secret[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    }
}

/// `Bearer tok` → `tok`; a value without an auth scheme is the credential itself.
fn credential_part(secret: &str) -> &str {
    match secret.trim().split_once(' ') {
        Some((scheme, token))
            if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            token.trim()
        }
        _ => secret,
    }
}

fn json_escaped(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'"' | b'\\' | b'/' => out.extend_from_slice(&[b'\\', b]),
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new(&[
            CredentialRule::new("k", &["a.test"], "x-api-key", "PH-K", "sk-abc/def\"x").unwrap(),
            CredentialRule::new("g", &["b.test"], "authorization", "PH-G", "Bearer gh-tok")
                .unwrap(),
        ])
    }

    /// Feeds `input` cut at every offset in `cuts` order and returns what came out.
    fn stream(input: &[u8], piece: usize) -> Vec<u8> {
        let s = secrets();
        let mut scrub = s.stream();
        let mut out = Vec::new();
        for p in input.chunks(piece) {
            scrub.push(p, &mut out);
        }
        scrub.finish(&mut out);
        out
    }

    #[test]
    fn every_form_is_replaced_whole_or_split_at_any_offset() {
        let input = b"k=sk-abc/def\"x j=\"sk-abc\\/def\\\"x\" a=Bearer gh-tok t=gh-tok end";
        let want = b"k=PH-K j=\"PH-K\" a=Bearer PH-G t=PH-G end".to_vec();
        for piece in 1..=input.len() {
            assert_eq!(
                String::from_utf8(stream(input, piece)).unwrap(),
                String::from_utf8(want.clone()).unwrap(),
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn only_a_possible_secret_start_is_held_back() {
        let s = secrets();
        let mut scrub = s.stream();
        let mut out = Vec::new();
        scrub.push(b"data: one\n\n", &mut out);
        assert_eq!(out, b"data: one\n\n", "an event ends; nothing is held");
        out.clear();
        scrub.push(b"x sk-ab", &mut out);
        assert_eq!(out, b"x ");
        out.clear();
        scrub.push(b"c/def\"x!", &mut out);
        assert_eq!(out, b"PH-K!");
        out.clear();
        scrub.push(b"gh-", &mut out);
        scrub.finish(&mut out);
        assert_eq!(out, b"gh-", "a prefix at the end is released");
    }

    #[test]
    fn header_values() {
        let s = secrets();
        assert_eq!(s.replace_all(b"Bearer gh-tok"), b"Bearer PH-G");
        assert_eq!(s.replace_all(b"nothing here"), b"nothing here");
        assert!(!format!("{s:?}").contains("gh-tok"));
    }
}
