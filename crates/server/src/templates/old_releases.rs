//! Template files as earlier releases documented them load today, each key they used read
//! (an old name with a warning), so an upgrade never drops a data dir's templates.

use std::path::Path;

use super::parse::parse_template;

/// `(file name, text, stop_after_s it must give)`: the documented examples of each
/// release whose template format differs from today's.
const FIXTURES: &[(&str, &str, u64)] = &[
    (
        "issue3-mine.toml",
        include_str!("fixtures/issue3-mine.toml"),
        300,
    ),
    (
        "issue3-claude-code.toml",
        include_str!("fixtures/issue3-claude-code.toml"),
        900,
    ),
    (
        "pre-ladder-mine.toml",
        include_str!("fixtures/pre-ladder-mine.toml"),
        300,
    ),
];

#[test]
fn every_earlier_release_template_loads_with_a_warning_for_its_old_keys() {
    // The layers' host directories the examples name, made here.
    let host = tempfile::tempdir().unwrap();
    for dir in ["harness", "claude-code"] {
        std::fs::create_dir(host.path().join(dir)).unwrap();
    }
    for (file, text, stop_after_s) in FIXTURES {
        let text = text.replace("/srv/berth/", &format!("{}/", host.path().display()));
        let path = Path::new("/data/templates").join(file);
        let t = parse_template(&path, &text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(t.sleep.stop_after_s, *stop_after_s, "{file}");
        assert_eq!(t.warnings.len(), 1, "{file}: {:?}", t.warnings);
        assert!(
            t.warnings[0].contains("idle_timeout_s") && t.warnings[0].contains("stop_after_s"),
            "{file}: {:?}",
            t.warnings
        );
        assert!(t.harness.is_some(), "{file}");
    }
}

#[test]
fn the_new_name_wins_over_the_old_one_and_both_are_range_checked() {
    let path = Path::new("/data/templates/t.toml");
    let t = parse_template(
        path,
        "name = \"t\"\nidle_timeout_s = 60\nstop_after_s = 120\n",
    )
    .unwrap();
    assert_eq!(t.sleep.stop_after_s, 120);
    assert!(t.warnings[0].contains("ignored"), "{:?}", t.warnings);
    let t = parse_template(path, "name = \"t\"\nstop_after_s = 120\n").unwrap();
    assert!(t.warnings.is_empty());
    let err = parse_template(path, "name = \"t\"\nidle_timeout_s = 99999999\n").unwrap_err();
    assert_eq!(err.line, Some(2), "{err}");
    assert!(err.to_string().contains("idle_timeout_s"), "{err}");
}
