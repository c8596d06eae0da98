//! The `services` boot phase's reading: `<run dir>/services.json` (absent: the box has
//! none). The host validated the file; what is still checked here is what would otherwise
//! hang a boot: an `after` that names no service, or a cycle of them. Such a service is
//! refused (it starts as `failed`, with the reason), and the others run.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use berth_protocol::service::{ServiceConfig, MAX_SERVICES, SERVICES_FILE};

/// The largest `services.json` read: 32 services of a few KiB each, with room.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServicesFileError {
    #[error("services phase: cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("services phase: {path} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: String },
    #[error("services phase: {path} is not a list of services")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("services phase: {path} has {count} services; at most {MAX_SERVICES}")]
    TooMany { path: String, count: usize },
}

/// The box's services, each with why it is refused (`None`: it runs).
pub fn read(run_dir: &Path) -> Result<Vec<(ServiceConfig, Option<String>)>, ServicesFileError> {
    let path = run_dir.join(SERVICES_FILE);
    let shown = path.display().to_string();
    let raw = match std::fs::metadata(&path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ServicesFileError::Read {
                path: shown,
                source,
            })
        }
        Ok(meta) if meta.len() > MAX_FILE_BYTES => {
            return Err(ServicesFileError::TooLarge { path: shown })
        }
        Ok(_) => std::fs::read(&path).map_err(|source| ServicesFileError::Read {
            path: shown.clone(),
            source,
        })?,
    };
    let configs: Vec<ServiceConfig> =
        serde_json::from_slice(&raw).map_err(|source| ServicesFileError::Parse {
            path: shown.clone(),
            source,
        })?;
    if configs.len() > MAX_SERVICES {
        return Err(ServicesFileError::TooMany {
            path: shown,
            count: configs.len(),
        });
    }
    Ok(check(configs))
}

/// Pairs each service with why it cannot run: an empty command, a name given twice, an
/// `after` that names no other service, or one that leads back to itself.
pub fn check(configs: Vec<ServiceConfig>) -> Vec<(ServiceConfig, Option<String>)> {
    // The first service of a name is the one that counts.
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, config) in configs.iter().enumerate() {
        index.entry(config.name.as_str()).or_insert(i);
    }
    let refusals: Vec<Option<String>> = configs
        .iter()
        .enumerate()
        .map(|(i, config)| {
            if config.command.first().is_none_or(|p| p.is_empty()) {
                return Some("its command is empty".to_owned());
            }
            if index.get(config.name.as_str()) != Some(&i) {
                return Some(format!("the name {:?} is given twice", config.name));
            }
            if let Some(unknown) = config
                .after
                .iter()
                .find(|dep| !index.contains_key(dep.as_str()) || *dep == &config.name)
            {
                return Some(format!("`after` names {unknown:?}, not another service"));
            }
            leads_back(i, &configs, &index)
                .then(|| "its `after` links lead back to itself".to_owned())
        })
        .collect();
    configs.into_iter().zip(refusals).collect()
}

/// Whether following `after` links from service `start` reaches it again.
fn leads_back(start: usize, configs: &[ServiceConfig], index: &BTreeMap<&str, usize>) -> bool {
    let mut seen = vec![false; configs.len()];
    let mut todo: Vec<usize> = deps(start, configs, index).collect();
    while let Some(i) = todo.pop() {
        if i == start {
            return true;
        }
        if !std::mem::replace(&mut seen[i], true) {
            todo.extend(deps(i, configs, index));
        }
    }
    false
}

fn deps<'a>(
    i: usize,
    configs: &'a [ServiceConfig],
    index: &'a BTreeMap<&str, usize>,
) -> impl Iterator<Item = usize> + 'a {
    configs[i]
        .after
        .iter()
        .filter_map(|dep| index.get(dep.as_str()).copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn services(value: serde_json::Value) -> Vec<ServiceConfig> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn unknown_links_cycles_and_twice_given_names_are_refused_and_the_rest_run() {
        let checked = check(services(json!([
            {"name": "db", "command": ["db"]},
            {"name": "web", "command": ["web"], "after": ["db"]},
            {"name": "ghost", "command": ["x"], "after": ["nobody"]},
            {"name": "a", "command": ["x"], "after": ["b"]},
            {"name": "b", "command": ["x"], "after": ["a"]},
            {"name": "c", "command": ["x"], "after": ["a"]},
            {"name": "db", "command": ["again"]},
            {"name": "empty", "command": []},
        ])));
        let refused: Vec<(&str, Option<&str>)> = checked
            .iter()
            .map(|(c, why)| (c.name.as_str(), why.as_deref()))
            .collect();
        assert_eq!(refused[0], ("db", None));
        assert_eq!(refused[1], ("web", None));
        assert!(refused[2].1.unwrap().contains("\"nobody\""));
        assert!(refused[3].1.unwrap().contains("lead back"));
        assert!(refused[4].1.unwrap().contains("lead back"));
        // `c` depends on a cycle without being in it: it runs, and waits for `a` to fail.
        assert_eq!(refused[5], ("c", None));
        assert!(refused[6].1.unwrap().contains("twice"));
        assert!(refused[7].1.unwrap().contains("empty"));
    }

    #[test]
    fn no_file_is_no_services_and_a_bad_one_says_where() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join(SERVICES_FILE), b"{").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(err.to_string().contains("services.json"), "{err}");
    }
}
