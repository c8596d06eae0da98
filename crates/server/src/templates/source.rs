//! Where a template's text is, for its errors: a byte range of the file turned into a
//! 1-based line.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use super::error::{TemplateError, TemplateErrorKind};

/// Where in the text the error is: a byte range turned into a 1-based line.
pub(super) struct Source<'a> {
    file: &'a Path,
    text: &'a str,
}

impl<'a> Source<'a> {
    pub(super) fn new(file: &'a Path, text: &'a str) -> Self {
        Source { file, text }
    }

    fn line_of(&self, span: Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub(super) fn error(
        &self,
        span: Option<Range<usize>>,
        kind: TemplateErrorKind,
    ) -> TemplateError {
        TemplateError {
            file: self.file.to_path_buf(),
            line: span.map(|s| self.line_of(s)),
            kind: Box::new(kind),
        }
    }

    pub(super) fn at<T>(&self, value: &Spanned<T>, kind: TemplateErrorKind) -> TemplateError {
        self.error(Some(value.span()), kind)
    }
}
