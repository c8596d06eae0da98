//! Full-text search: ranked files, each with a plain-text snippet around its best match.
//!
//! Query words are OR'ed and ranked by BM25 over the body and the path (a path word weighs
//! twice a body word): a file with all the words ranks above one with some, and a question
//! phrased in many words still finds the files that share a few of them. tantivy's query
//! syntax works (`"exact phrase"`, `+must`, `-not`, `path:x.md`); a query it cannot parse
//! is searched as its plain words instead of failing.

use berth_protocol::memory_search::{MemoryHit, MemorySearchResults, MAX_SEARCH_LIMIT};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::snippet::{collapse_overlapped_ranges, SnippetGenerator};
use tantivy::tokenizer::TokenStream;
use tantivy::{TantivyDocument, Term};

use crate::{IndexError, MemoryIndex};

/// The longest snippet, in bytes: a few lines of a markdown file.
pub const SNIPPET_MAX_BYTES: usize = 200;

impl MemoryIndex {
    /// The files that best match `query`, best first, at most `limit` (clamped to
    /// 1..=[`MAX_SEARCH_LIMIT`]). A blank query is [`IndexError::EmptyQuery`].
    pub fn search(&self, query: &str, limit: usize) -> Result<MemorySearchResults, IndexError> {
        let words = query.trim();
        if words.is_empty() {
            return Err(IndexError::EmptyQuery);
        }
        let limit = limit.clamp(1, MAX_SEARCH_LIMIT);
        let parsed = match self.parser.parse_query(words) {
            Ok(parsed) => parsed,
            Err(_) => self.plain_words_query(words)?,
        };

        let searcher = self.searcher();
        let top = searcher
            .search(&*parsed, &TopDocs::with_limit(limit).order_by_score())
            .map_err(IndexError::read)?;
        let mut snippets = SnippetGenerator::create(&searcher, &*parsed, self.fields.body)
            .map_err(IndexError::read)?;
        snippets.set_max_num_chars(SNIPPET_MAX_BYTES);

        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address).map_err(IndexError::read)?;
            let text = |field| {
                doc.get_first(field)
                    .and_then(|value| value.as_str())
                    .unwrap_or_default()
            };
            let (snippet, highlights) = snippet(&snippets, text(self.fields.body));
            hits.push(MemoryHit {
                path: text(self.fields.path).to_owned(),
                score,
                snippet,
                highlights,
            });
        }
        Ok(MemorySearchResults {
            query: query.to_owned(),
            hits,
            indexed_files: searcher.num_docs(),
        })
    }

    /// `words` as a union of its words, without any query syntax: the fallback for a query
    /// tantivy cannot parse (`"unbalanced`, `a:b:`). A query without words (`(((`) matches
    /// nothing.
    fn plain_words_query(&self, words: &str) -> Result<Box<dyn Query>, IndexError> {
        let mut analyzer = self
            .index
            .tokenizer_for_field(self.fields.body)
            .map_err(IndexError::read)?;
        let mut tokens = Vec::new();
        let mut stream = analyzer.token_stream(words);
        while stream.advance() {
            tokens.push(stream.token().text.clone());
        }
        tokens.sort();
        tokens.dedup();

        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(tokens.len() * 2);
        for token in tokens {
            let body = Term::from_field_text(self.fields.body, &token);
            let path = Term::from_field_text(self.fields.path_words, &token);
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(body, IndexRecordOption::WithFreqs)),
            ));
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(path, IndexRecordOption::WithFreqs)),
                    crate::index::PATH_BOOST,
                )),
            ));
        }
        Ok(Box::new(BooleanQuery::new(clauses)))
    }
}

/// The snippet of `body` and its highlighted byte ranges. A file that matched by its path
/// alone shows its first lines, nothing highlighted.
fn snippet(generator: &SnippetGenerator, body: &str) -> (String, Vec<[usize; 2]>) {
    let snippet = generator.snippet(body);
    if snippet.highlighted().is_empty() {
        return (head(body, SNIPPET_MAX_BYTES).to_owned(), Vec::new());
    }
    let highlights = collapse_overlapped_ranges(snippet.highlighted())
        .into_iter()
        .map(|range| [range.start, range.end])
        .collect();
    (snippet.fragment().to_owned(), highlights)
}

/// At most `max` bytes of the start of `text`, cut at a character boundary.
fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_cuts_at_a_character_boundary() {
        assert_eq!(head("abc", 10), "abc");
        assert_eq!(head("caféé", 4), "caf");
        assert_eq!(head("caféé", 5), "café");
        assert_eq!(head("", 0), "");
    }
}
