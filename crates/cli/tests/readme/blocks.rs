//! README.md's shell blocks, in order, with the comments that steer how the walk-through
//! test runs them (the convention is written at the top of README's "Use it" section):
//! `<!-- readme-test: skip: WHY -->`, `<!-- readme-test: needs: qemu -->` and
//! `<!-- readme-test: terminal: LINE => send "TEXT", expect "TEXT" -->`, each on one line
//! right before the block's fence.

/// One ```sh block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The line of its opening fence (from 1), for failure messages.
    pub line: usize,
    pub lines: Vec<String>,
    pub steer: Vec<Steer>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Steer {
    Skip(String),
    /// The block needs QEMU and the images `berth image build` makes.
    NeedsQemu,
    /// `line` of the block runs in a real terminal, driven by `steps`.
    Terminal {
        line: String,
        steps: Vec<Step>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Type this and Enter.
    Send(String),
    /// Wait until the screen shows this.
    Expect(String),
}

/// Why a steering comment cannot be read.
#[derive(Debug, PartialEq)]
pub struct SteerError {
    pub line: usize,
    pub why: String,
}

const MARK: &str = "<!-- readme-test:";

/// Every ```sh block of `text`, with its steering comments.
pub fn blocks(text: &str) -> Result<Vec<Block>, SteerError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```sh" {
            i += 1;
            continue;
        }
        let mut steer = Vec::new();
        let mut above = i;
        while above > 0 && lines[above - 1].starts_with(MARK) {
            above -= 1;
            steer.insert(0, parse_steer(lines[above], above + 1)?);
        }
        let start = i;
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && lines[i].trim_end() != "```" {
            body.push(lines[i].to_owned());
            i += 1;
        }
        out.push(Block {
            line: start + 1,
            lines: body,
            steer,
        });
        i += 1;
    }
    Ok(out)
}

fn parse_steer(raw: &str, line: usize) -> Result<Steer, SteerError> {
    let fail = |why: &str| SteerError {
        line,
        why: format!("{why}: {raw}"),
    };
    let inner = raw
        .strip_prefix(MARK)
        .and_then(|r| r.trim_end().strip_suffix("-->"))
        .ok_or_else(|| fail("not one `<!-- readme-test: … -->` line"))?
        .trim();
    if let Some(why) = inner.strip_prefix("skip:") {
        return Ok(Steer::Skip(why.trim().to_owned()));
    }
    if inner == "needs: qemu" {
        return Ok(Steer::NeedsQemu);
    }
    let Some(rest) = inner.strip_prefix("terminal:") else {
        return Err(fail("unknown steering (skip:, needs: qemu, terminal:)"));
    };
    let (run, script) = rest
        .split_once("=>")
        .ok_or_else(|| fail("a terminal line needs `=> send \"…\", expect \"…\"`"))?;
    let steps = steps(script.trim()).map_err(|why| fail(&why))?;
    Ok(Steer::Terminal {
        line: run.trim().to_owned(),
        steps,
    })
}

/// `send "a", expect "b"`: words and double-quoted texts (no escapes), comma-separated.
fn steps(mut rest: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    while !rest.is_empty() {
        let (word, after) = rest
            .split_once(" \"")
            .ok_or_else(|| format!("expected `send \"…\"` or `expect \"…\"` at {rest:?}"))?;
        let (text, after) = after
            .split_once('"')
            .ok_or_else(|| format!("an unclosed quote at {rest:?}"))?;
        steps.push(match word.trim() {
            "send" => Step::Send(text.to_owned()),
            "expect" => Step::Expect(text.to_owned()),
            other => return Err(format!("unknown step {other:?}")),
        });
        rest = after.trim_start().trim_start_matches(',').trim_start();
    }
    Ok(steps)
}

/// Whether `written` (a line of a block, maybe with a trailing `# comment`) is `line`.
pub fn is_line(written: &str, line: &str) -> bool {
    written
        .strip_prefix(line)
        .is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with('#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "text\n\
        <!-- readme-test: skip: it runs a daemon -->\n\
        ```sh\n\
        make up\n\
        ```\n\
        ```sh\n\
        echo a   # a\n\
        ```\n\
        <!-- readme-test: needs: qemu -->\n\
        <!-- readme-test: terminal: berth shell a => send \"echo $((1+1))\", expect \"2\", send \"exit\" -->\n\
        ```sh\n\
        berth shell a        # a terminal\n\
        ```\n";

    #[test]
    fn blocks_come_in_order_with_their_steering() {
        let found = blocks(SAMPLE).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].steer, [Steer::Skip("it runs a daemon".into())]);
        assert_eq!(
            (found[1].line, &found[1].lines[..]),
            (6, &["echo a   # a".to_owned()][..])
        );
        assert!(found[1].steer.is_empty());
        assert_eq!(
            found[2].steer,
            [
                Steer::NeedsQemu,
                Steer::Terminal {
                    line: "berth shell a".into(),
                    steps: vec![
                        Step::Send("echo $((1+1))".into()),
                        Step::Expect("2".into()),
                        Step::Send("exit".into()),
                    ],
                }
            ]
        );
        assert!(is_line(&found[2].lines[0], "berth shell a"));
        assert!(!is_line("berth shell ab", "berth shell a"));
    }

    #[test]
    fn a_bad_steering_comment_is_an_error_naming_its_line() {
        let err = blocks("<!-- readme-test: frob -->\n```sh\ntrue\n```\n").unwrap_err();
        assert_eq!(err.line, 1);
        let err =
            blocks("<!-- readme-test: terminal: x => type \"y\" -->\n```sh\nx\n```\n").unwrap_err();
        assert!(err.why.contains("unknown step"), "{err:?}");
    }
}
