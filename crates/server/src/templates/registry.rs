//! The set of templates: built-ins plus `<data-dir>/templates/*.toml`, immutable once
//! loaded. A reload builds a whole new registry; [`SharedTemplates`] swaps it in at once, so
//! a reader sees either the old set or the new one, never a mix.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::parse::parse_template;
use super::{Template, TemplateError, TemplateErrorKind};

/// Largest template file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Where user templates live. Only `*.toml` files in it are templates (`host/` beside them
/// is the sandbox runtime's rootfs).
pub fn templates_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("templates")
}

#[derive(Debug, Clone)]
pub struct TemplateRegistry {
    data_dir: PathBuf,
    builtins: Vec<Arc<Template>>,
    by_name: BTreeMap<String, Arc<Template>>,
}

impl TemplateRegistry {
    /// The built-ins and every good file of `<data_dir>/templates/`; the bad files are
    /// returned as errors (each skipped whole). Blocking file I/O.
    pub fn load(
        data_dir: &Path,
        builtins: Vec<Template>,
    ) -> (TemplateRegistry, Vec<TemplateError>) {
        Self::load_with(data_dir, builtins.into_iter().map(Arc::new).collect())
    }

    /// A new registry from the same data dir and built-ins, with the files as they are now.
    pub fn reload(&self) -> (TemplateRegistry, Vec<TemplateError>) {
        Self::load_with(&self.data_dir, self.builtins.clone())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Template>> {
        self.by_name.get(name)
    }

    /// Every template, by name.
    pub fn list(&self) -> Vec<Arc<Template>> {
        self.by_name.values().cloned().collect()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn load_with(
        data_dir: &Path,
        builtins: Vec<Arc<Template>>,
    ) -> (TemplateRegistry, Vec<TemplateError>) {
        let mut by_name: BTreeMap<String, Arc<Template>> = builtins
            .iter()
            .map(|t| (t.name.clone(), t.clone()))
            .collect();
        let mut errors = Vec::new();
        for file in template_files(&templates_dir(data_dir), &mut errors) {
            match load_file(&file) {
                Ok(t) if builtins.iter().any(|b| b.name == t.name) => {
                    errors.push(TemplateError {
                        line: line_of_name(&file),
                        file,
                        kind: Box::new(TemplateErrorKind::BuiltinClash { name: t.name }),
                    });
                }
                Ok(t) => {
                    for warning in &t.warnings {
                        tracing::warn!(file = %file.display(), "template: {warning}");
                    }
                    by_name.insert(t.name.clone(), Arc::new(t));
                }
                Err(e) => errors.push(e),
            }
        }
        let registry = TemplateRegistry {
            data_dir: data_dir.to_path_buf(),
            builtins,
            by_name,
        };
        (registry, errors)
    }
}

/// The `*.toml` regular files of `dir`, by name; hidden files are left out. A missing dir
/// holds none.
fn template_files(dir: &Path, errors: &mut Vec<TemplateError>) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            errors.push(TemplateError {
                file: dir.to_path_buf(),
                line: None,
                kind: Box::new(TemplateErrorKind::Read(e)),
            });
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "toml")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && p.is_file()
        })
        .collect();
    files.sort();
    files
}

fn load_file(file: &Path) -> Result<Template, TemplateError> {
    let err = |kind| TemplateError {
        file: file.to_path_buf(),
        line: None,
        kind: Box::new(kind),
    };
    let f = std::fs::File::open(file).map_err(|e| err(TemplateErrorKind::Read(e)))?;
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(TemplateErrorKind::Read(e)))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(err(TemplateErrorKind::TooLarge {
            max_bytes: MAX_FILE_BYTES,
        }));
    }
    parse_template(file, &text)
}

/// The line of the `name` key, for errors about the name found after parsing.
fn line_of_name(file: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix("name")
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// The registry the server holds: read by every box creation and template listing,
/// replaced whole by a reload.
#[derive(Debug)]
pub struct SharedTemplates {
    current: RwLock<Arc<TemplateRegistry>>,
    /// One reload at a time, so two reloads cannot swap in out of order.
    reloading: Mutex<()>,
}

impl SharedTemplates {
    pub fn new(registry: TemplateRegistry) -> SharedTemplates {
        SharedTemplates {
            current: RwLock::new(Arc::new(registry)),
            reloading: Mutex::new(()),
        }
    }

    /// The registry as of now (a snapshot: later reloads do not change it).
    pub fn current(&self) -> Arc<TemplateRegistry> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Template>> {
        self.current().get(name).cloned()
    }

    /// Re-reads the files and swaps the new registry in. Blocking file I/O (call it from
    /// `spawn_blocking` in async code).
    pub fn reload(&self) -> (Arc<TemplateRegistry>, Vec<TemplateError>) {
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (next, errors) = self.current().reload();
        let next = Arc::new(next);
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = next.clone();
        (next, errors)
    }
}
