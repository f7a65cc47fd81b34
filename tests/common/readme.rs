//! The README's command lines as a shell would run them: the code-block
//! lines that start with a prefix, and their words. Shared by the test
//! that runs the Operator tasks and the one that parses every command.

#![allow(dead_code)]

/// The README's text.
pub fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

/// The lines of `text`'s code blocks, in order.
pub fn code_lines(text: &str) -> Vec<&str> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if in_code {
            out.push(line);
        }
    }
    out
}

/// A command line split as `sh` splits it (words, single quotes, a
/// comment from a word that starts with `#`).
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in line.chars() {
        match c {
            '#' if !quoted && !any => break,
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}
