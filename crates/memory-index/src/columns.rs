//! Reading string columns (fast fields) for every live document at once: `files()` and
//! `graph()` need each file's path and one other column, never the stored bodies.

use tantivy::columnar::StrColumn;
use tantivy::{DocAddress, Searcher};

use crate::schema::PATH;

/// Every live document's path with its values of the string column `other`.
pub(crate) fn paths_with(
    searcher: &Searcher,
    other: &str,
) -> tantivy::Result<Vec<(String, Vec<String>)>> {
    let mut rows = Vec::with_capacity(usize::try_from(searcher.num_docs()).unwrap_or(0));
    for segment in searcher.segment_readers() {
        let fast = segment.fast_fields();
        // A segment without a path column has no documents with a path: none of ours.
        let Some(paths) = fast.str(PATH)? else {
            continue;
        };
        let path_terms = terms(&paths)?;
        let others = fast.str(other)?;
        let other_terms = match &others {
            Some(column) => terms(column)?,
            None => Vec::new(),
        };
        for doc in segment.doc_ids_alive() {
            let Some(path) = first(&paths, &path_terms, doc) else {
                continue;
            };
            let values = match &others {
                Some(column) => column
                    .term_ords(doc)
                    .filter_map(|ord| term(&other_terms, ord))
                    .map(str::to_owned)
                    .collect(),
                None => Vec::new(),
            };
            rows.push((path.to_owned(), values));
        }
    }
    Ok(rows)
}

/// The path of one document.
pub(crate) fn path_of(searcher: &Searcher, address: DocAddress) -> tantivy::Result<Option<String>> {
    let Some(segment) = searcher.segment_readers().get(address.segment_ord as usize) else {
        return Ok(None);
    };
    let Some(paths) = segment.fast_fields().str(PATH)? else {
        return Ok(None);
    };
    let Some(ord) = paths.term_ords(address.doc_id).next() else {
        return Ok(None);
    };
    let mut path = String::new();
    Ok(paths.ord_to_str(ord, &mut path)?.then_some(path))
}

/// A column's dictionary, by term ordinal: one pass over it instead of a lookup per value.
fn terms(column: &StrColumn) -> std::io::Result<Vec<String>> {
    let dictionary = column.dictionary();
    let mut terms = Vec::with_capacity(dictionary.num_terms());
    let mut stream = dictionary.stream()?;
    while stream.advance() {
        // Our columns hold only text written from `&str`.
        terms.push(String::from_utf8_lossy(stream.key()).into_owned());
    }
    Ok(terms)
}

fn term(terms: &[String], ord: u64) -> Option<&str> {
    terms.get(usize::try_from(ord).ok()?).map(String::as_str)
}

fn first<'a>(column: &StrColumn, terms: &'a [String], doc: u32) -> Option<&'a str> {
    column
        .term_ords(doc)
        .next()
        .and_then(|ord| term(terms, ord))
}
