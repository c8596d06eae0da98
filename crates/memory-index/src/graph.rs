//! Links between files, resolved at query time against the files the index holds now (see
//! `links.rs` for why the index keeps link texts rather than targets).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashSet};

use berth_protocol::memory_search::{MemoryEdge, MemoryGraph, MemoryLink, MemoryLinks, MemoryNode};
use tantivy::collector::{Count, DocSetCollector, TopDocs};
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{Searcher, TantivyDocument, Term};

use crate::links::{resolve_link, texts_resolving_to};
use crate::schema::LINK_KEYS;
use crate::{columns, IndexError, MemoryIndex};

impl MemoryIndex {
    /// The links written in `path` and where they lead, and the files whose links lead to
    /// `path` (sorted, without `path` itself). [`IndexError::NotIndexed`] when the index
    /// does not hold `path`.
    pub fn links(&self, path: &str) -> Result<MemoryLinks, IndexError> {
        let searcher = self.searcher();
        let by_path = TermQuery::new(
            Term::from_field_text(self.fields.path, path),
            IndexRecordOption::Basic,
        );
        let found = searcher
            .search(&by_path, &TopDocs::with_limit(1).order_by_score())
            .map_err(IndexError::read)?;
        let Some(&(_, address)) = found.first() else {
            return Err(IndexError::NotIndexed {
                path: path.to_owned(),
            });
        };
        let doc: TantivyDocument = searcher.doc(address).map_err(IndexError::read)?;

        let lookup = Lookup {
            index: self,
            searcher: &searcher,
            error: RefCell::new(None),
        };
        let exists = |candidate: &str| lookup.exists(candidate);
        let outgoing = doc
            .get_all(self.fields.links)
            .filter_map(|value| value.as_str())
            .map(|text| {
                let target = resolve_link(text, exists);
                MemoryLink {
                    text: text.to_owned(),
                    exists: exists(&target),
                    target,
                }
            })
            .collect();
        let backlinks = self.backlinks(&searcher, path, exists)?;
        lookup.finish()?;
        Ok(MemoryLinks {
            path: path.to_owned(),
            outgoing,
            backlinks,
        })
    }

    /// Every indexed file, every link target that does not exist (yet), and every link
    /// between them. A file's link to itself is no edge.
    pub fn graph(&self) -> Result<MemoryGraph, IndexError> {
        let rows = columns::paths_with(&self.searcher(), LINK_KEYS).map_err(IndexError::read)?;
        let existing: HashSet<&str> = rows.iter().map(|(path, _)| path.as_str()).collect();

        let mut nodes: BTreeMap<String, bool> = existing
            .iter()
            .map(|path| ((*path).to_owned(), true))
            .collect();
        let mut edges = BTreeSet::new();
        for (from, keys) in &rows {
            for key in keys {
                let to = resolve_link(key, |path| existing.contains(path));
                if to == *from {
                    continue;
                }
                nodes.entry(to.clone()).or_insert(false);
                edges.insert((from.clone(), to));
            }
        }
        Ok(MemoryGraph {
            nodes: nodes
                .into_iter()
                .map(|(path, exists)| MemoryNode { path, exists })
                .collect(),
            edges: edges
                .into_iter()
                .map(|(from, to)| MemoryEdge { from, to })
                .collect(),
        })
    }

    /// The files whose links resolve to `path`: the link texts that could, kept where they
    /// do, then the files holding any of them.
    fn backlinks(
        &self,
        searcher: &Searcher,
        path: &str,
        exists: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, IndexError> {
        let clauses: Vec<(Occur, Box<dyn Query>)> = texts_resolving_to(path)
            .into_iter()
            .filter(|text| resolve_link(text, &exists) == path)
            .map(|text| {
                let term = Term::from_field_text(self.fields.link_keys, &text);
                let query: Box<dyn Query> =
                    Box::new(TermQuery::new(term, IndexRecordOption::Basic));
                (Occur::Should, query)
            })
            .collect();
        let addresses = searcher
            .search(&BooleanQuery::new(clauses), &DocSetCollector)
            .map_err(IndexError::read)?;

        let mut from = BTreeSet::new();
        for address in addresses {
            if let Some(source) = columns::path_of(searcher, address).map_err(IndexError::read)? {
                if source != path {
                    from.insert(source);
                }
            }
        }
        Ok(from.into_iter().collect())
    }
}

/// Which paths the index holds, one lookup at a time, for `resolve_link`'s `exists`: the
/// first failed lookup is kept and reported by `finish`, once the links are resolved.
struct Lookup<'a> {
    index: &'a MemoryIndex,
    searcher: &'a Searcher,
    error: RefCell<Option<tantivy::TantivyError>>,
}

impl Lookup<'_> {
    /// Whether the index holds `path` (deleted documents not counted).
    fn exists(&self, path: &str) -> bool {
        let query = TermQuery::new(
            Term::from_field_text(self.index.fields.path, path),
            IndexRecordOption::Basic,
        );
        match self.searcher.search(&query, &Count) {
            Ok(count) => count > 0,
            Err(err) => {
                self.error.borrow_mut().get_or_insert(err);
                false
            }
        }
    }

    fn finish(self) -> Result<(), IndexError> {
        match self.error.into_inner() {
            Some(err) => Err(IndexError::read(err)),
            None => Ok(()),
        }
    }
}
