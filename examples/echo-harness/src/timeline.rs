//! `/memory/timeline/<YYYY-MM-DD>.md`: each turn as `- user: …` / `- assistant: …` lines.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The UTC civil date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
pub fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

pub fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (y, m, d) = civil_date(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// One line per message; newlines inside a message are flattened.
pub fn append(memory: &Path, user: &str, assistant: &str) -> io::Result<()> {
    let dir = memory.join("timeline");
    std::fs::create_dir_all(&dir)?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.md", today())))?;
    let flat = |s: &str| s.replace('\n', " ");
    file.write_all(
        format!("- user: {}\n- assistant: {}\n", flat(user), flat(assistant)).as_bytes(),
    )?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(19_723), (2024, 1, 1));
        assert_eq!(civil_date(20_786), (2026, 11, 29));
        assert_eq!(civil_date(-1), (1969, 12, 31));
    }
}
