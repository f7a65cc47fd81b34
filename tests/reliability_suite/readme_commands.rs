//! Every `agentsadm` command the README shows, wherever it shows it (the
//! Operator tasks section is also run against the simulator, in
//! orch_suite `readme_tasks`): each concrete command line parses with the
//! developer's build's own parser, and every option a synopsis line names
//! exists on the command it names it for. A renamed flag or subcommand
//! fails here before an operator copies it.

use agentsadm_cli::Cli;
use agentsadm_dev::cli::DevCommand;
use clap::{CommandFactory, Parser};

use crate::readme_common::{code_lines, readme, words};

/// The README's command lines: code-block lines that start with
/// `agentsadm ` or `cargo run --release -- ` (as `agentsadm ...`), with
/// their comments (the shell's split drops them) and a trailing `&` left
/// off.
fn readme_commands() -> Vec<String> {
    let readme = readme();
    code_lines(&readme)
        .into_iter()
        .filter_map(|line| match line.strip_prefix("cargo run --release -- ") {
            Some(rest) => Some(format!("agentsadm {rest}")),
            None => line.starts_with("agentsadm ").then(|| line.to_string()),
        })
        .map(|line| {
            let mut kept = Vec::new();
            let mut quoted = false;
            for word in line.split(' ') {
                if !quoted && word.starts_with('#') {
                    break;
                }
                quoted ^= word.matches('\'').count() % 2 == 1;
                kept.push(word);
            }
            kept.join(" ")
                .trim_end()
                .trim_end_matches('&')
                .trim_end()
                .to_string()
        })
        .collect()
}

/// A synopsis line (placeholders and alternatives), not a command to run.
fn is_synopsis(line: &str) -> bool {
    line.contains('[') || line.contains('|') || line.contains("...") || line.contains('(')
}

#[test]
fn every_concrete_command_in_the_readme_parses() {
    let run = "5cb12e78-6677-48c3-8a41-4de2ddb8f132";
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in readme_commands().iter().filter(|l| !is_synopsis(l)) {
        let args: Vec<String> = words(line)
            .into_iter()
            .map(|w| if w == "RUN" { run.to_string() } else { w })
            .collect();
        checked += 1;
        if let Err(e) = Cli::<DevCommand>::try_parse_from(&args) {
            failures.push(format!(
                "`{line}`: {}",
                e.render().to_string().lines().next().unwrap_or_default()
            ));
        }
    }
    assert!(checked >= 40, "only {checked} command lines found");
    assert!(
        failures.is_empty(),
        "{} of {checked} README commands do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The options `cmd` takes: `--long` and `-s` forms.
fn options(cmd: &clap::Command) -> Vec<String> {
    let mut out = vec!["--help".to_string(), "-h".to_string()];
    for a in cmd.get_arguments() {
        out.extend(
            a.get_long_and_visible_aliases()
                .into_iter()
                .flatten()
                .map(|l| format!("--{l}")),
        );
        out.extend(
            a.get_short_and_visible_aliases()
                .into_iter()
                .flatten()
                .map(|s| format!("-{s}")),
        );
    }
    out
}

#[test]
fn every_option_a_readme_synopsis_names_exists() {
    let mut root = Cli::<DevCommand>::command();
    root.build();
    let global = options(&root);
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in readme_commands().iter().filter(|l| is_synopsis(l)) {
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let Some(name) = words.first() else { continue };
        let Some(cmd) = root.find_subcommand(name) else {
            failures.push(format!("`{line}`: no command {name}"));
            continue;
        };
        // The command, and the subcommands the line names after it
        // (`server delete|factory-reset`, `gz install ... | remove ...`).
        let mut scopes = vec![cmd.clone()];
        for w in &words[1..] {
            for alt in w.split('|') {
                if let Some(sub) = cmd.find_subcommand(alt) {
                    scopes.push(sub.clone());
                }
            }
        }
        let known: Vec<String> = scopes
            .iter()
            .flat_map(options)
            .chain(global.iter().cloned())
            .collect();
        for w in &words[1..] {
            for token in w.split(['[', ']', '(', ')', '|', '=']) {
                if !token.starts_with('-') || token == "-" || token.starts_with("--)") {
                    continue;
                }
                let token = token.trim_end_matches("...");
                checked += 1;
                if !known.iter().any(|k| k == token) {
                    failures.push(format!("`{line}`: {name} has no option {token}"));
                }
            }
        }
    }
    assert!(
        checked >= 40,
        "only {checked} options found in synopsis lines"
    );
    assert!(
        failures.is_empty(),
        "{} README synopsis options do not exist:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn readme_lines_lose_their_comments_and_background_marks() {
    assert!(is_synopsis("agentsadm list [--summary]"));
    assert!(!is_synopsis("agentsadm list --summary"));
    assert_eq!(
        words("agentsadm hold vm-agent --reason 'change freeze'"),
        ["agentsadm", "hold", "vm-agent", "--reason", "change freeze"]
    );
    let all = readme_commands();
    assert!(
        all.iter().all(|l| !l.contains(" #") && !l.ends_with('&')),
        "{all:?}"
    );
    assert!(
        all.iter().any(|l| l.starts_with("agentsadm sim serve")),
        "{all:?}"
    );
}
