//! `[backup]` of berth.toml (`schedule` says what it does), apart from the scheduler so that
//! the host's configuration takes it without taking the daemon.

use std::path::PathBuf;

use serde::Deserialize;

/// `[backup]`, validated while parsing.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupHostConfig {
    #[serde(default)]
    pub dir: Option<PathBuf>,
    #[serde(default = "default_interval_s", deserialize_with = "positive")]
    pub interval_s: u64,
    #[serde(default = "default_keep", deserialize_with = "positive")]
    pub keep: u64,
}

impl Default for BackupHostConfig {
    fn default() -> Self {
        BackupHostConfig {
            dir: None,
            interval_s: default_interval_s(),
            keep: default_keep(),
        }
    }
}

fn default_interval_s() -> u64 {
    86_400
}

fn default_keep() -> u64 {
    7
}

fn positive<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if value == 0 {
        return Err(serde::de::Error::custom("must be 1 or more"));
    }
    Ok(value)
}
