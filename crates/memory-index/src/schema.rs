//! What one indexed file is made of, and what each commit records beside it.
//!
//! One document per file. Fields that are read for every file at once (`files()`,
//! `graph()`) are fast fields (columns), so those reads never decompress the stored bodies;
//! the stored fields serve a single document (snippets, one file's links).

use serde::{Deserialize, Serialize};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::schema::{FAST, STORED, STRING};
use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RemoveLongFilter, SimpleTokenizer, TextAnalyzer,
};
use tantivy::Index;

/// The version of the schema and of what the fields hold. An index written under another
/// version is deleted on open and rebuilt (it is a cache). Bump it with any change to
/// the schema, the tokenizer, or what `apply` puts in a field.
pub const SCHEMA_VERSION: u32 = 1;

/// The analyzer of words in bodies and paths: split on anything not a letter or digit
/// (`entities/alice-smith.md` is `entities alice smith md`), lowercase, fold accents
/// (`café` is found by `cafe`). Words over 40 bytes are dropped (base64 and hashes).
const WORDS_TOKENIZER: &str = "berth_words";

/// Longer words are not indexed, as tantivy's default tokenizer does.
const MAX_WORD_BYTES: usize = 40;

/// The names of the fields read as columns.
pub(crate) const PATH: &str = "path";
pub(crate) const HASH: &str = "hash";
pub(crate) const LINK_KEYS: &str = "link_keys";

#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    /// The path below `/memory`, whole: the document's key (deletes, lookups).
    pub path: Field,
    /// The path's words, for search.
    pub path_words: Field,
    /// The caller's content hash.
    pub hash: Field,
    /// The indexed text; stored for snippets. Absent for a file that is not text.
    pub body: Field,
    /// The link texts as written, in order (`links()` shows them).
    pub links: Field,
    /// The link texts normalized (`/memory/x` is `x`): looked up for backlinks, read as a
    /// column for the graph.
    pub link_keys: Field,
}

/// The schema and its fields.
pub(crate) fn build() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let words = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(WORDS_TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        path: builder.add_text_field(PATH, STRING | STORED | FAST),
        path_words: builder.add_text_field("path_words", words.clone()),
        hash: builder.add_text_field(HASH, FAST),
        body: builder.add_text_field("body", words.set_stored()),
        links: builder.add_text_field("links", STORED),
        link_keys: builder.add_text_field(LINK_KEYS, STRING | FAST),
    };
    (builder.build(), fields)
}

/// Makes the words analyzer known to `index`: tantivy keeps tokenizers in memory only, so
/// this runs on every open.
pub(crate) fn register_tokenizer(index: &Index) {
    let analyzer = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_WORD_BYTES))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build();
    index.tokenizers().register(WORDS_TOKENIZER, analyzer);
}

/// What each commit records in tantivy's commit payload: the schema version it was written
/// under and the caller's version, durable together with the commit.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Payload {
    pub schema: u32,
    pub version: Option<String>,
}

impl Payload {
    pub fn new(version: Option<String>) -> Payload {
        Payload {
            schema: SCHEMA_VERSION,
            version,
        }
    }

    pub fn encode(&self) -> String {
        // A struct of a number and a string always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The payload of the current schema version; None for any other, or none at all.
    pub fn decode(payload: Option<&str>) -> Option<Payload> {
        let payload: Payload = serde_json::from_str(payload?).ok()?;
        (payload.schema == SCHEMA_VERSION).then_some(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_and_refuses_other_versions() {
        for version in [None, Some(String::new()), Some("abc\n\"q\"".to_string())] {
            let payload = Payload::new(version);
            assert_eq!(Payload::decode(Some(&payload.encode())), Some(payload));
        }
        let older = format!(r#"{{"schema":{},"version":"x"}}"#, SCHEMA_VERSION - 1);
        assert_eq!(Payload::decode(Some(&older)), None);
        assert_eq!(Payload::decode(Some("not json")), None);
        assert_eq!(Payload::decode(None), None);
    }
}
