//! The Prometheus text exposition format, version 0.0.4: what `/metrics` answers with.
//!
//! Each family is written whole: `# HELP`, `# TYPE`, then its samples, one a line,
//! `name{label="value",…} value`. Label values are escaped (`\\`, `\"`, `\n`), HELP text
//! likewise (`\\`, `\n`); a histogram's buckets are cumulative, `le` ascending, ending with
//! `+Inf`, whose count is the `_count`. Names are checked against the format's grammar in
//! debug builds: every name and label name here is a constant of this crate.

use berth_basics::HistogramSnapshot;
use std::fmt::Write as _;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// An exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts family `name`: its HELP and TYPE lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(valid_name(name), "metric name {name:?}");
        debug_assert!(
            kind != Kind::Counter || name.ends_with("_total"),
            "a counter's name ends with _total: {name}"
        );
        let _ = writeln!(
            self.out,
            "# HELP {name} {}\n# TYPE {name} {}",
            escape(help, false),
            kind.as_str()
        );
    }

    /// One sample of an integer value.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.line(name, labels, None, &value.to_string());
    }

    /// One sample of a real value.
    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.line(name, labels, None, &float(value));
    }

    /// The samples of histogram `name` (its family started with [`Kind::Histogram`]):
    /// `_bucket` per bound and `+Inf`, `_sum`, `_count`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], buckets: &HistogramSnapshot) {
        debug_assert_eq!(buckets.cumulative.len(), buckets.bounds_s.len() + 1);
        debug_assert!(buckets.cumulative.windows(2).all(|w| w[0] <= w[1]));
        let bucket = format!("{name}_bucket");
        for (bound, count) in buckets.bounds_s.iter().zip(&buckets.cumulative) {
            self.line(&bucket, labels, Some(&float(*bound)), &count.to_string());
        }
        let count = buckets.cumulative.last().copied().unwrap_or(0);
        self.line(&bucket, labels, Some("+Inf"), &count.to_string());
        let sum_s = buckets.sum.as_secs_f64();
        self.line(&format!("{name}_sum"), labels, None, &float(sum_s));
        self.line(&format!("{name}_count"), labels, None, &count.to_string());
    }

    /// The exposition written.
    pub fn finish(self) -> String {
        self.out
    }

    fn line(&mut self, name: &str, labels: &[(&str, &str)], le: Option<&str>, value: &str) {
        self.out.push_str(name);
        let mut pairs = labels.iter().copied().chain(le.map(|le| ("le", le)));
        if let Some((first_name, first_value)) = pairs.next() {
            self.out.push('{');
            self.label(first_name, first_value);
            for (label, value) in pairs {
                self.out.push(',');
                self.label(label, value);
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(value);
        self.out.push('\n');
    }

    fn label(&mut self, name: &str, value: &str) {
        debug_assert!(valid_label_name(name), "label name {name:?}");
        self.out.push_str(name);
        self.out.push_str("=\"");
        self.out.push_str(&escape(value, true));
        self.out.push('"');
    }
}

/// `text` with `\` and newlines escaped, and `"` too in a label value.
fn escape(text: &str, label_value: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label_value => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A value as Go's `ParseFloat` (Prometheus') reads it: `+Inf`, `-Inf`, `NaN`, or decimal.
fn float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_help_type_then_samples_with_escaped_labels() {
        let mut e = Exposition::default();
        e.family("berth_things_total", Kind::Counter, "Things.\nA \\ path");
        e.sample("berth_things_total", &[("name", "a \"b\"\\c\nd")], 3);
        e.sample("berth_things_total", &[], 0);
        assert_eq!(
            e.finish(),
            "# HELP berth_things_total Things.\\nA \\\\ path\n\
             # TYPE berth_things_total counter\n\
             berth_things_total{name=\"a \\\"b\\\"\\\\c\\nd\"} 3\n\
             berth_things_total 0\n"
        );
    }

    #[test]
    fn a_histogram_ends_with_inf_equal_to_its_count() {
        let mut e = Exposition::default();
        e.family("berth_wait_seconds", Kind::Histogram, "Waits.");
        e.histogram(
            "berth_wait_seconds",
            &[("kind", "read")],
            &HistogramSnapshot {
                bounds_s: &[0.0001, 0.5, 2.0],
                cumulative: vec![1, 1, 3, 4],
                sum: std::time::Duration::from_millis(7250),
            },
        );
        let text = e.finish();
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "berth_wait_seconds_bucket{kind=\"read\",le=\"0.0001\"} 1",
                "berth_wait_seconds_bucket{kind=\"read\",le=\"0.5\"} 1",
                "berth_wait_seconds_bucket{kind=\"read\",le=\"2\"} 3",
                "berth_wait_seconds_bucket{kind=\"read\",le=\"+Inf\"} 4",
                "berth_wait_seconds_sum{kind=\"read\"} 7.25",
                "berth_wait_seconds_count{kind=\"read\"} 4",
            ]
        );
    }

    #[test]
    fn floats_are_written_as_prometheus_reads_them() {
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(1e-7), "0.0000001");
        assert_eq!(float(30.0), "30");
    }

    #[test]
    fn names_follow_the_grammar() {
        assert!(valid_name("berth_a:b_1"));
        assert!(!valid_name("1berth"));
        assert!(!valid_name("berth-x"));
        assert!(valid_label_name("le"));
        assert!(!valid_label_name("__name__"));
        assert!(!valid_label_name("a:b"));
    }
}
