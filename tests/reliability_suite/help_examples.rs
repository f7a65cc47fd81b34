//! Every example in every `--help` parses: each line of each command's long
//! help (the developer's build, so `sim`, `demo` and `bench` too) that
//! starts with `agentsadm ` is fed back to the same parser.

use agentsadm_cli::Cli;
use agentsadm_dev::cli::DevCommand;
use clap::{CommandFactory, Parser};

/// A help line's words, with '...' and "..." quoting as a shell would.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// (command path, long help) of `cmd` and every subcommand under it.
fn helps(cmd: &mut clap::Command, path: &str, out: &mut Vec<(String, String)>) {
    out.push((path.to_string(), cmd.render_long_help().to_string()));
    for sub in cmd.get_subcommands_mut() {
        let name = format!("{path} {}", sub.get_name());
        helps(sub, &name, out);
    }
}

#[test]
fn every_example_in_every_help_parses() {
    let mut cli = Cli::<DevCommand>::command();
    cli.build();
    let mut all = Vec::new();
    helps(&mut cli, "agentsadm", &mut all);
    let mut examples = 0;
    let mut failures = Vec::new();
    for (path, help) in &all {
        for line in help.lines().map(str::trim) {
            // Example lines; a usage line ("Usage: agentsadm ...") does not
            // start with the program name.
            let Some(rest) = line.strip_prefix("agentsadm ") else {
                continue;
            };
            // A line of prose that happens to start with the name.
            if rest.starts_with(char::is_uppercase) {
                continue;
            }
            examples += 1;
            if let Err(e) = Cli::<DevCommand>::try_parse_from(words(line)) {
                failures.push(format!(
                    "{path}: `{line}`: {}",
                    e.render().to_string().lines().next().unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        examples >= 16,
        "only {examples} examples found; did the help format change?"
    );
    assert!(
        failures.is_empty(),
        "{} of {examples} help examples do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn help_lines_split_into_words_as_a_shell_would() {
    assert_eq!(
        words(r#"agentsadm server delete cn1 --reason "old box" -y"#),
        [
            "agentsadm",
            "server",
            "delete",
            "cn1",
            "--reason",
            "old box",
            "-y"
        ]
    );
    assert_eq!(words("agentsadm  list  ''"), ["agentsadm", "list", ""]);
}
