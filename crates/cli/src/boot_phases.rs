//! The phases of a box's last start (`last_boot` in its API record), as `berth box show`
//! prints them under the JSON for a person at a terminal: where the cold start's time went.

use serde::Deserialize;

use crate::table::table;

/// `last_boot` as the API gives it. Lenient: a daemon without it (an older one), or with
/// more fields, is fine.
#[derive(Debug, Deserialize)]
struct LastBoot {
    total_ms: f64,
    #[serde(default)]
    phases: Vec<Phase>,
}

#[derive(Debug, Deserialize)]
struct Phase {
    name: String,
    micros: u64,
}

/// The table of a box record's `last_boot`: a header line with the total, then one row a
/// phase (its time and share of the total); `None` when the record has none.
pub fn table_of(record: &serde_json::Value) -> Option<String> {
    let boot = LastBoot::deserialize(record.get("last_boot")?).ok()?;
    let total_micros = boot.total_ms * 1000.0;
    let rows: Vec<Vec<String>> = boot
        .phases
        .iter()
        .map(|p| {
            let share = if total_micros > 0.0 {
                format!("{:.0} %", p.micros as f64 * 100.0 / total_micros)
            } else {
                String::new()
            };
            vec![
                p.name.clone(),
                format!("{:.1} ms", p.micros as f64 / 1000.0),
                share,
            ]
        })
        .collect();
    let mut out = format!("last boot: {:.1} ms\n", boot.total_ms);
    if !rows.is_empty() {
        out.push_str(&table(&["PHASE", "TIME", "SHARE"], &rows));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn phases_print_as_a_table_under_the_total() {
        let record = json!({"name": "alice", "last_boot": {"total_ms": 200, "phases": [
            {"name": "runtime", "micros": 150_000},
            {"name": "channel", "micros": 49_500},
        ]}});
        assert_eq!(
            table_of(&record).unwrap(),
            "last boot: 200.0 ms\n\
             PHASE     TIME       SHARE\n\
             runtime   150.0 ms   75 %\n\
             channel   49.5 ms    25 %\n"
        );
    }

    #[test]
    fn no_last_boot_or_no_phases_is_tolerated() {
        assert_eq!(table_of(&json!({"name": "alice"})), None);
        assert_eq!(table_of(&json!({"last_boot": null})), None);
        assert_eq!(table_of(&json!({"last_boot": {"phases": "odd"}})), None);
        assert_eq!(
            table_of(&json!({"last_boot": {"total_ms": 0, "phases": []}})).unwrap(),
            "last boot: 0.0 ms\n"
        );
    }
}
