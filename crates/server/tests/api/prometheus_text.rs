//! A strict reader of the Prometheus text format (0.0.4) for the `/metrics` tests: it
//! refuses what a lenient scraper would let pass (a sample before its family's TYPE, a
//! family declared twice or interleaved with another, a bad escape, a duplicate series, a
//! counter not named `_total`, a histogram whose buckets are not cumulative or whose `+Inf`
//! is not its `_count`), and answers the samples by name and labels.

use std::collections::{BTreeMap, HashSet};

/// A series' labels, sorted by name.
pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Default)]
pub struct Exposition {
    pub families: Vec<Family>,
}

impl Exposition {
    /// Parses `text`, or says where and why it is not valid.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut families: Vec<Family> = Vec::new();
        let mut help: Option<(String, String)> = None;
        let mut seen_series = HashSet::new();
        if !text.is_empty() && !text.ends_with('\n') {
            return Err("the exposition does not end with a newline".into());
        }
        for (n, line) in text.lines().enumerate() {
            let at = |why: String| format!("line {}: {why}: {line:?}", n + 1);
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, text) = rest
                    .split_once(' ')
                    .ok_or_else(|| at("no HELP text".into()))?;
                check_name(name).map_err(at)?;
                if families.iter().any(|f| f.name == name) {
                    return Err(at(format!("family {name} declared twice")));
                }
                help = Some((name.to_owned(), unescape(text, false).map_err(at)?));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| at("no type".into()))?;
                let Some((help_name, help_text)) = help.take() else {
                    return Err(at("TYPE without a HELP before it".into()));
                };
                if help_name != name {
                    return Err(at(format!("TYPE of {name} after the HELP of {help_name}")));
                }
                if !matches!(
                    kind,
                    "counter" | "gauge" | "histogram" | "summary" | "untyped"
                ) {
                    return Err(at(format!("unknown type {kind}")));
                }
                if kind == "counter" && !name.ends_with("_total") {
                    return Err(at("a counter's name must end with _total".into()));
                }
                families.push(Family {
                    name: name.to_owned(),
                    kind: kind.to_owned(),
                    help: help_text,
                    samples: Vec::new(),
                });
            } else if line.starts_with('#') || line.trim().is_empty() {
                return Err(at("only HELP and TYPE comments, no blank lines".into()));
            } else {
                let sample = parse_sample(line).map_err(at)?;
                let family = families
                    .last_mut()
                    .ok_or_else(|| at("a sample before any family".into()))?;
                if !belongs(&sample.name, family) {
                    return Err(at(format!(
                        "sample {} outside its family (the current one is {})",
                        sample.name, family.name
                    )));
                }
                let series = (sample.name.clone(), sample.labels.clone());
                if !seen_series.insert(series) {
                    return Err(at("a duplicate series".into()));
                }
                family.samples.push(sample);
            }
        }
        if let Some((name, _)) = help {
            return Err(format!("HELP of {name} without a TYPE"));
        }
        let exposition = Exposition { families };
        for family in exposition.families.iter().filter(|f| f.kind == "histogram") {
            check_histogram(family)?;
        }
        Ok(exposition)
    }

    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The value of series `name{labels}`, if shown.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.families
            .iter()
            .flat_map(|f| &f.samples)
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Like [`Exposition::value`], failing the test when the series is missing.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in /metrics"))
    }

    pub fn sample_count(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }
}

fn belongs(sample: &str, family: &Family) -> bool {
    match family.kind.as_str() {
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| sample.strip_suffix(suffix) == Some(family.name.as_str())),
        _ => sample == family.name,
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("invalid metric name {name:?}"))
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("a sample without a value")?;
    let name = &line[..name_end];
    check_name(name)?;
    let mut rest = &line[name_end..];
    let mut labels = Labels::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or("a label without =")?;
            let label = &rest[..eq];
            let label_ok = !label.is_empty()
                && !label.starts_with("__")
                && label
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !label_ok {
                return Err(format!("invalid label name {label:?}"));
            }
            rest = rest[eq + 1..]
                .strip_prefix('"')
                .ok_or("a label value not in quotes")?;
            let (raw, after) = quoted(rest)?;
            if labels
                .insert(label.to_owned(), unescape(raw, true)?)
                .is_some()
            {
                return Err(format!("label {label} twice"));
            }
            rest = after;
            if let Some(after) = rest.strip_prefix(',') {
                rest = after;
            } else if !rest.starts_with('}') {
                return Err("labels not separated by commas".into());
            }
        }
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    if value.contains(' ') {
        return Err("a timestamp or trailing text after the value".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value: parse_value(value)?,
    })
}

/// The raw text up to the closing quote, and what follows it.
fn quoted(s: &str) -> Result<(&str, &str), String> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Ok((&s[..i], &s[i + 1..])),
            _ => escaped = false,
        }
    }
    Err("an unterminated label value".into())
}

fn unescape(raw: &str, label_value: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('"') if label_value => out.push('"'),
                other => return Err(format!("bad escape \\{other:?}")),
            },
            '\n' => return Err("a raw newline".into()),
            '"' if label_value => return Err("a raw quote".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn parse_value(value: &str) -> Result<f64, String> {
    match value {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        v => v.parse().map_err(|e| format!("value {v:?}: {e}")),
    }
}

/// Per series (labels less `le`): `le` ascending and ending with `+Inf`, counts
/// cumulative, `+Inf` equal to `_count`, and a `_sum`.
fn check_histogram(family: &Family) -> Result<(), String> {
    let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    for s in family
        .samples
        .iter()
        .filter(|s| s.name.ends_with("_bucket"))
    {
        let mut labels = s.labels.clone();
        let le = labels
            .remove("le")
            .ok_or_else(|| format!("{}: a bucket without le", family.name))?;
        series
            .entry(labels)
            .or_default()
            .push((parse_value(&le)?, s.value));
    }
    if series.is_empty() && !family.samples.is_empty() {
        return Err(format!("{}: a histogram without buckets", family.name));
    }
    for (labels, buckets) in series {
        let what = format!("{}{labels:?}", family.name);
        if buckets.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(format!("{what}: le not ascending: {buckets:?}"));
        }
        if buckets.windows(2).any(|w| w[0].1 > w[1].1) {
            return Err(format!("{what}: buckets not cumulative: {buckets:?}"));
        }
        let (last_le, inf) = *buckets.last().unwrap();
        if last_le != f64::INFINITY {
            return Err(format!("{what}: the last bucket is not +Inf"));
        }
        let find = |suffix: &str| {
            family
                .samples
                .iter()
                .find(|s| s.name == format!("{}{suffix}", family.name) && s.labels == labels)
                .map(|s| s.value)
        };
        let count = find("_count").ok_or_else(|| format!("{what}: no _count"))?;
        if count != inf {
            return Err(format!("{what}: +Inf is {inf} but _count is {count}"));
        }
        let sum = find("_sum").ok_or_else(|| format!("{what}: no _sum"))?;
        if sum < 0.0 || (count == 0.0 && sum != 0.0) {
            return Err(format!("{what}: _sum {sum} for {count} observations"));
        }
    }
    Ok(())
}

#[test]
fn the_reader_refuses_what_the_format_does_not_allow() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\"} 1\n\
                # HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n\
                h_sum 3.5\nh_count 2\n";
    let parsed = Exposition::parse(good).unwrap();
    assert_eq!(parsed.get("a_total", &[("x", "q\"\\\n")]), 1.0);
    assert_eq!(parsed.get("h_count", &[]), 2.0);
    for (bad, why) in [
        ("a 1\n", "no family"),
        ("# TYPE a gauge\na 1\n", "no HELP"),
        ("# HELP a A.\n# TYPE a counter\na 1\n", "counter without _total"),
        ("# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n", "duplicate"),
        ("# HELP a A.\n# TYPE a gauge\na{x=\"\\t\"} 1\n", "bad escape"),
        ("# HELP a A.\n# TYPE a gauge\na{x=1} 1\n", "unquoted"),
        ("# HELP a A.\n# TYPE a gauge\nb 1\n", "outside its family"),
        ("# HELP a A.\n# TYPE a gauge\na 1", "no final newline"),
        ("# HELP a A.\n# TYPE a gauge\na 1 123 4\n", "trailing"),
        (
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
            "not cumulative",
        ),
        (
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
            "+Inf is not _count",
        ),
        (
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
            "no +Inf",
        ),
    ] {
        assert!(Exposition::parse(bad).is_err(), "{why}: {bad:?} was accepted");
    }
}
