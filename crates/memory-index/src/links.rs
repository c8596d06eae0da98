//! `[[links]]` between memory files: finding them in a file's text and deciding which file
//! each one names.
//!
//! The index stores what was written (the text between the brackets), never the file it
//! resolved to: resolution depends on which files exist, so it runs at query time against
//! the indexed paths, and a link to a file created later resolves to it from then on.

use std::collections::HashSet;

/// The longest link text kept, in bytes; longer ones are not links anyone wrote by hand.
pub const MAX_LINK_BYTES: usize = 512;

/// The texts of a file's `[[links]]`, in order of first appearance, without repeats.
///
/// A text is what stands between `[[` and `]]`, before any `|` (`[[alice|Alice S.]]` is
/// `alice`), trimmed. A link does not span lines; of nested openings (`[[a [[b]]`) the
/// innermost counts. Texts that could not name a file are skipped: empty, longer than
/// [`MAX_LINK_BYTES`], holding NUL, `[` or `]`, or whose path has an empty or `..`
/// component (`[[../x]]`, `[[a//b]]`). Code is not prose: brackets in a fenced block or an
/// inline code span are not links (the seeded README shows the syntax as `` `[[name]]` ``).
pub fn parse_links(text: &str) -> Vec<String> {
    let prose = without_code(text);
    let mut seen = HashSet::new();
    let mut links = Vec::new();
    let mut rest = prose.as_str();
    while let Some(open) = rest.find("[[") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("]]") else { break };
        // The innermost opening before this closing: `[[a [[b]]` and `[[[b]]` link `b`.
        let candidate = &rest[open..open + 2 + close];
        let inner = candidate
            .rfind("[[")
            .map_or(candidate, |at| &candidate[at + 2..]);
        rest = &after[close + 2..];

        let text = inner.split('|').next().unwrap_or_default().trim();
        if is_link_text(text) && seen.insert(text) {
            links.push(text.to_string());
        }
    }
    links
}

/// `text` with its fenced code blocks (lines between ``` or ~~~ fences) and inline code
/// spans (a run of backticks up to the next run of as many, on one line) left out.
fn without_code(text: &str) -> String {
    let mut prose = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (Some(_), _) => {}
            (None, None) => strip_code_spans(line, &mut prose),
        }
        prose.push('\n');
    }
    prose
}

fn strip_code_spans(line: &str, prose: &mut String) {
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        prose.push_str(&rest[..start]);
        let run = rest[start..].bytes().take_while(|b| *b == b'`').count();
        let after = &rest[start + run..];
        let closing = "`".repeat(run);
        // The closing run must be exactly as long: find one not part of a longer run.
        let mut search = 0;
        let end = loop {
            match after[search..].find(&closing) {
                None => break None,
                Some(at) => {
                    let at = search + at;
                    let longer = after[at + run..].starts_with('`');
                    if !longer && (at == 0 || !after[..at].ends_with('`')) {
                        break Some(at);
                    }
                    search = at + after[at..].bytes().take_while(|b| *b == b'`').count();
                }
            }
        };
        match end {
            Some(at) => rest = &after[at + run..],
            // An unclosed run is literal backticks.
            None => {
                prose.push_str(&rest[start..start + run]);
                rest = after;
            }
        }
    }
    prose.push_str(rest.trim_end_matches('\n'));
}

/// Whether `text` (already trimmed) can be a link to a file below `/memory`.
fn is_link_text(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_LINK_BYTES {
        return false;
    }
    if text.contains(['\0', '\n', '\r', '[', ']']) {
        return false;
    }
    normalize(text)
        .split('/')
        .all(|part| !part.is_empty() && part != "..")
}

/// The link text as a path below `/memory`: agents write `[[/memory/x]]` and `[[/x]]` for
/// `[[x]]` alike.
pub(crate) fn normalize(text: &str) -> &str {
    let text = text.strip_prefix('/').unwrap_or(text);
    text.strip_prefix("memory/").unwrap_or(text)
}

/// The path below `/memory` that the link text names, given which paths exist. The text is
/// one [`parse_links`] returned; a leading `/` and `memory/` are ignored. The first rule that
/// applies wins:
///
/// 1. `text` exists: it is a literal path (`timeline/2026-12-01.md`, `README.md`);
/// 2. `text.md` exists;
/// 3. `text` has no `/` and `entities/text.md` exists;
/// 4. nothing exists: where the file would be written, `entities/text.md` for a bare name
///    (the seed puts entities there), else `text.md` (`text` itself if it ends in `.md`).
///
/// For a bare name ending in `.md` (`[[alice.md]]`), rules 3 and 4 use the name without
/// `.md`, so that it resolves to `entities/alice.md`, not `entities/alice.md.md`.
pub fn resolve_link(text: &str, exists: impl Fn(&str) -> bool) -> String {
    let text = normalize(text);
    if exists(text) {
        return text.to_string();
    }
    let with_md = format!("{text}.md");
    if exists(&with_md) {
        return with_md;
    }
    if text.contains('/') {
        return if text.ends_with(".md") {
            text.to_string()
        } else {
            with_md
        };
    }
    // Rules 3 and 4 name the same file for a bare name: whether it exists or not, that is
    // where it is (or would be written).
    let name = text.strip_suffix(".md").unwrap_or(text);
    format!("entities/{name}.md")
}

/// The normalized link texts that [`resolve_link`] could turn into the existing `path`:
/// which other files' link keys to look up for its backlinks. Each one still has to be
/// checked with `resolve_link` (a nearer file may win).
pub(crate) fn texts_resolving_to(path: &str) -> Vec<String> {
    let mut texts = vec![path.to_string()];
    if let Some(stem) = path.strip_suffix(".md") {
        texts.push(stem.to_string());
    }
    if let Some(name) = path
        .strip_prefix("entities/")
        .and_then(|rest| rest.strip_suffix(".md"))
        .filter(|name| !name.contains('/'))
    {
        texts.push(name.to_string());
        texts.push(format!("{name}.md"));
    }
    texts.sort();
    texts.dedup();
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_aliases_blanks_and_nesting() {
        let text = "See [[alice|Alice S.]], [[ bob ]], [[]], [[ | x]], [[a [[carol]] b]] \
                    and [[[dave]]] and [[alice]] again and [[eve|]] [[unclosed";
        assert_eq!(parse_links(text), ["alice", "bob", "carol", "dave", "eve"]);
    }

    #[test]
    fn refuses_texts_that_cannot_name_a_file() {
        let long = "x".repeat(MAX_LINK_BYTES + 1);
        let text = format!(
            "[[../x]] [[a/../b]] [[a//b]] [[a/]] [[/]] [[a\0b]] [[{long}]] [[a]b]] [[two\nlines]] [[ok/..x]]"
        );
        assert_eq!(parse_links(&text), ["ok/..x"]);
        let longest = "y".repeat(MAX_LINK_BYTES);
        assert_eq!(parse_links(&format!("[[{longest}]]")), [longest]);
    }

    #[test]
    fn code_is_not_prose() {
        let text = "Write `[[name]]` or ``[[x]] `y` ``, like [[real]].\n\
                    ```md\n[[fenced]]\n```\n\
                    after [[kept]] and an unclosed ` [[tick]]\n\
                    ~~~\n[[tilde]]\n";
        assert_eq!(parse_links(text), ["real", "kept", "tick"]);
    }

    #[test]
    fn keeps_non_ascii_texts() {
        assert_eq!(parse_links("[[Zoë]] [[café/menü]]"), ["Zoë", "café/menü"]);
    }

    fn exists_in(paths: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |path| paths.contains(&path)
    }

    #[test]
    fn resolves_by_the_four_rules_in_order() {
        let paths = exists_in(&[
            "README.md",
            "timeline/2026-12-01.md",
            "notes.md",
            "notes",
            "entities/alice.md",
            "entities/bob.md",
            "bob.md",
        ]);
        // 1: a literal path, even when `text.md` exists too.
        assert_eq!(resolve_link("README.md", &paths), "README.md");
        assert_eq!(resolve_link("notes", &paths), "notes");
        assert_eq!(
            resolve_link("timeline/2026-12-01.md", &paths),
            "timeline/2026-12-01.md"
        );
        // 2: `text.md`, before `entities/`.
        assert_eq!(
            resolve_link("timeline/2026-12-01", &paths),
            "timeline/2026-12-01.md"
        );
        assert_eq!(resolve_link("bob", &paths), "bob.md");
        // 3: a bare name in entities/.
        assert_eq!(resolve_link("alice", &paths), "entities/alice.md");
        assert_eq!(resolve_link("alice.md", &paths), "entities/alice.md");
        // 4: nothing exists.
        assert_eq!(resolve_link("carol", &paths), "entities/carol.md");
        assert_eq!(resolve_link("carol.md", &paths), "entities/carol.md");
        assert_eq!(resolve_link("projects/x", &paths), "projects/x.md");
        assert_eq!(resolve_link("projects/x.md", &paths), "projects/x.md");
        // A leading `/` and `memory/` are ignored.
        assert_eq!(resolve_link("/memory/alice", &paths), "entities/alice.md");
        assert_eq!(resolve_link("/README.md", &paths), "README.md");
        assert_eq!(resolve_link("memory/notes.md", &paths), "notes.md");
    }

    #[test]
    fn backlink_candidates_cover_every_rule() {
        let paths = exists_in(&["entities/alice.md", "timeline/x.md"]);
        for path in ["entities/alice.md", "timeline/x.md"] {
            let texts = texts_resolving_to(path);
            for text in [
                "alice",
                "alice.md",
                "entities/alice",
                "entities/alice.md",
                "timeline/x",
                "timeline/x.md",
            ] {
                let resolves_here = resolve_link(text, &paths) == path;
                assert_eq!(
                    texts.iter().any(|t| t == text),
                    resolves_here,
                    "{text} -> {path}"
                );
            }
        }
    }
}
