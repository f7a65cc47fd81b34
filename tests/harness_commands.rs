//! Every agentsadm command line of the real-Triton harness
//! (`tests/real-triton/lib/*.sh`, where the harness calls agentsadm `aa`)
//! parses with the build's own command-line parser. CI cannot run the
//! harness (it needs the public sources and the network), so without this
//! a renamed flag or a changed subcommand would surface only when someone
//! next runs it against the real services, as a check failing for a
//! reason that has nothing to do with them.
//!
//! The harness's shell is read as a shell would read it, as far as these
//! lines go: a command is the words after `aa` at a command position up to
//! the next operator (`;`, `&&`, `|`, `)`, a redirection); variables take
//! the placeholder values below (a UUID for a server, a URL for an API);
//! a function that hands its arguments on to `aa` (`"$@"`, `$1`, after its
//! `shift N`) is expanded at each place it is called.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentsadm_cli::Cli;
use agentsadm_dev::cli::DevCommand;
use clap::Parser;
use clap::error::ErrorKind;

/// The harness's scripts that call agentsadm.
fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real-triton/lib");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .collect();
    out.sort();
    out
}

/// What each variable the harness puts on an agentsadm command line stands
/// for. A variable missing here fails the test: add it with a value of the
/// kind the harness gives it.
fn placeholder(name: &str) -> Option<Vec<String>> {
    let uuid = "5cb12e78-6677-48c3-8a41-4de2ddb8f132";
    let value = match name {
        // servers, runs, images
        "S1" | "S2" | "S3" | "S4" | "S5" | "S6" | "T" | "u" | "server" | "run" | "STAND_IN"
        | "img" | "image" => uuid,
        // API URLs
        "IMGAPI_URL" | "SAPI_URL" | "CNAPI_URL" | "UPDATES_URL" | "SIM_IMGAPI_URL"
        | "SIM_SAPI_URL" | "REAL_IMGAPI_URL" | "REAL_SAPI_URL" => "http://127.0.0.1:27410",
        // files and folders
        "RT_LIB" | "RT_ROOT" | "RT_HOME" | "d" | "out" => "/tmp/rt",
        "AGENTSADM" => "agentsadm",
        "component" | "c" | "held" => "vm-agent",
        "version" => "1.0.0",
        // `-y` for hold and release where the build has it (checks.sh
        // asks the binary); the line must parse without it too
        "HOLD_Y" => return Some(Vec::new()),
        _ => return None,
    };
    Some(vec![value.to_string()])
}

/// A token of a shell line: a word (with the variables it expands) or an
/// operator.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Op(String),
}

/// Ends the word being read: kept, or dropped when it was a redirection's
/// target.
fn end_word(word: &mut String, in_word: &mut bool, skip: &mut bool, out: &mut Vec<Token>) {
    if *in_word {
        if *skip {
            *skip = false;
            word.clear();
        } else {
            out.push(Token::Word(std::mem::take(word)));
        }
        *in_word = false;
    }
}

/// Splits one (joined) shell line into words and operators. Quotes group;
/// `$(` counts as an opening operator; a redirection's target and a
/// `2>&1` are dropped with it.
fn tokens(line: &str) -> Vec<Token> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let (mut single, mut double) = (false, false);
    let mut skip_target = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if single {
            if c == '\'' {
                single = false;
            } else {
                word.push(c);
            }
        } else if double {
            if c == '"' {
                double = false;
            } else {
                word.push(c);
            }
        } else {
            match c {
                '\'' => {
                    single = true;
                    in_word = true;
                }
                '"' => {
                    double = true;
                    in_word = true;
                }
                '#' if !in_word => break,
                ' ' | '\t' => end_word(&mut word, &mut in_word, &mut skip_target, &mut out),
                '$' if chars.get(i + 1) == Some(&'(') => {
                    end_word(&mut word, &mut in_word, &mut skip_target, &mut out);
                    out.push(Token::Op("(".into()));
                    i += 1;
                }
                '>' | '<' => {
                    // `2>`, `&>`: the descriptor is part of the redirection
                    if in_word && word.chars().all(|d| d.is_ascii_digit()) {
                        word.clear();
                        in_word = false;
                    }
                    end_word(&mut word, &mut in_word, &mut skip_target, &mut out);
                    while matches!(chars.get(i + 1), Some('>') | Some('<')) {
                        i += 1;
                    }
                    if chars.get(i + 1) == Some(&'&') {
                        // `>&1`: a descriptor, no file
                        i += 1;
                        while chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                            i += 1;
                        }
                    } else {
                        skip_target = true;
                    }
                }
                ';' | '&' | '|' | '(' | ')' => {
                    end_word(&mut word, &mut in_word, &mut skip_target, &mut out);
                    let mut op = c.to_string();
                    if matches!(c, '&' | '|') && chars.get(i + 1) == Some(&c) {
                        op.push(c);
                        i += 1;
                    }
                    out.push(Token::Op(op));
                }
                c => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        i += 1;
    }
    end_word(&mut word, &mut in_word, &mut skip_target, &mut out);
    out
}

/// Words that leave the next word at a command position.
fn keeps_command_position(word: &str) -> bool {
    matches!(
        word,
        "then"
            | "do"
            | "if"
            | "elif"
            | "else"
            | "while"
            | "until"
            | "!"
            | "{"
            | "}"
            | "time"
            | "fi"
            | "done"
            | "esac"
    ) || (word.contains('=')
        && word.split('=').next().is_some_and(|n| {
            !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }))
}

/// The simple commands of one line: (command word, its arguments).
fn commands(line: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut at_start = true;
    let mut current: Option<(String, Vec<String>)> = None;
    for t in tokens(line) {
        match t {
            Token::Op(op) => {
                match current.take() {
                    // `name() {`: a function's definition, not a call
                    Some((_, args)) if op == "(" && args.is_empty() => {}
                    c => out.extend(c),
                }
                at_start = true;
            }
            Token::Word(w) => {
                if let Some((_, args)) = current.as_mut() {
                    args.push(w);
                } else if at_start && !keeps_command_position(&w) {
                    current = Some((w, Vec::new()));
                    at_start = false;
                }
            }
        }
    }
    out.extend(current);
    out
}

/// One script's lines with backslash continuations joined, each with the
/// function it is in.
fn lines_with_functions(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut function = None;
    let mut pending = String::new();
    for raw in text.lines() {
        if let Some(head) = raw.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(raw);
        let line = std::mem::take(&mut pending);
        let trimmed = line.trim_start();
        if let Some(i) = trimmed.find("() ")
            && !line.starts_with(' ')
            && trimmed[..i]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            function = Some(trimmed[..i].to_string());
        }
        out.push((function.clone(), line));
    }
    out
}

/// Expands a word's variables with `lookup`; `Err` names a variable that
/// has no value.
fn expand(word: &str, lookup: &dyn Fn(&str) -> Option<Vec<String>>) -> Result<Vec<String>, String> {
    // A word that is only an array or "$@" spreads into several words.
    let whole = word
        .strip_prefix("${")
        .and_then(|w| w.strip_suffix("[@]}"))
        .or_else(|| (word == "$@").then_some("@"));
    if let Some(name) = whole {
        return lookup(name).ok_or_else(|| format!("${name}"));
    }
    let chars: Vec<char> = word.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let (name, next) = if chars.get(i + 1) == Some(&'{') {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '}')
                .map_or(chars.len(), |p| i + p);
            (chars[i + 2..end].iter().collect::<String>(), end + 1)
        } else {
            let mut end = i + 1;
            while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
                end += 1;
                if chars[i + 1].is_ascii_digit() {
                    break;
                }
            }
            (chars[i + 1..end].iter().collect::<String>(), end)
        };
        let value = lookup(&name).ok_or_else(|| format!("${name}"))?;
        out.push_str(&value.join(" "));
        i = next;
    }
    Ok(vec![out])
}

/// The `shift N` of each function (0 when it has none).
fn shifts(all: &[(Option<String>, String)]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (f, line) in all {
        let Some(f) = f else { continue };
        let n = line
            .split(';')
            .find_map(|part| match part.trim() {
                "shift" => Some(1),
                p => p.strip_prefix("shift ").and_then(|n| n.trim().parse().ok()),
            })
            .unwrap_or(0);
        let e = out.entry(f.clone()).or_insert(0);
        *e = (*e).max(n);
    }
    out
}

/// Every agentsadm command line of the harness, expanded, with where it
/// came from; and the lines that could not be expanded.
fn harness_commands() -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut all = Vec::new();
    for path in scripts() {
        let text = std::fs::read_to_string(&path).expect("harness script");
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        for (i, (f, line)) in lines_with_functions(&text).into_iter().enumerate() {
            all.push((format!("{name}:{}", i + 1), f, line));
        }
    }
    let funcs: Vec<(Option<String>, String)> =
        all.iter().map(|(_, f, l)| (f.clone(), l.clone())).collect();
    let shift = shifts(&funcs);
    let calls = |func: &str| -> Vec<(String, Vec<String>)> {
        all.iter()
            .flat_map(|(at, _, line)| {
                commands(line)
                    .into_iter()
                    .filter(|(c, _)| c == func)
                    .map(|(_, args)| (at.clone(), args))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (at, f, line) in &all {
        for (cmd, args) in commands(line) {
            if cmd != "aa" {
                continue;
            }
            let positional = args
                .iter()
                .any(|a| a.contains("$@") || a.contains("$1") || a.contains("$2"));
            // (call site, that call's arguments after the function's shift)
            let sites: Vec<(String, Option<Vec<String>>)> = match (positional, f) {
                (true, Some(f)) => {
                    let s = calls(f);
                    if s.is_empty() {
                        bad.push(format!(
                            "{at}: {f} hands its arguments to agentsadm but is never called"
                        ));
                    }
                    let n = shift.get(f).copied().unwrap_or(0);
                    s.into_iter()
                        .map(|(site, a)| {
                            (
                                format!("{at} via {site}"),
                                Some(a.into_iter().skip(n).collect()),
                            )
                        })
                        .collect()
                }
                _ => vec![(at.clone(), None)],
            };
            for (site, call_args) in sites {
                let lookup = |name: &str| -> Option<Vec<String>> {
                    if let Some(ca) = &call_args {
                        // the caller's words, expanded where the call is
                        let ca: Vec<String> = ca
                            .iter()
                            .flat_map(|w| {
                                expand(w, &placeholder).unwrap_or_else(|_| vec![w.clone()])
                            })
                            .collect();
                        if name == "@" {
                            return Some(ca);
                        }
                        if let Ok(k) = name.parse::<usize>() {
                            return ca.get(k.wrapping_sub(1)).map(|v| vec![v.clone()]);
                        }
                    }
                    placeholder(name)
                };
                let mut words = vec!["agentsadm".to_string()];
                let mut missing = None;
                for a in &args {
                    match expand(a, &lookup) {
                        Ok(w) => words.extend(w),
                        Err(v) => missing = Some(v),
                    }
                }
                match missing {
                    Some(v) => bad.push(format!(
                        "{site}: `{}`: no placeholder for {v} (add one to placeholder())",
                        line.trim()
                    )),
                    None => out.push((site, words)),
                }
            }
        }
    }
    (out, bad)
}

#[test]
fn every_agentsadm_command_of_the_real_triton_harness_parses() {
    let (commands, unexpanded) = harness_commands();
    assert!(unexpanded.is_empty(), "{}", unexpanded.join("\n"));
    let mut failures = Vec::new();
    for (at, words) in &commands {
        let parsed = Cli::<DevCommand>::try_parse_from(words);
        if let Err(e) = parsed.map(|_| ()).or_else(|e| match e.kind() {
            // `--help` and `--version` are asked for on purpose
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(()),
            _ => Err(e),
        }) {
            failures.push(format!(
                "{at}: `{}`: {}",
                words.join(" "),
                e.render().to_string().lines().next().unwrap_or_default()
            ));
        }
    }
    assert!(
        commands.len() >= 30,
        "only {} agentsadm command lines found in the harness",
        commands.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} harness command lines do not parse:\n{}",
        failures.len(),
        commands.len(),
        failures.join("\n")
    );
}

#[test]
fn the_reader_splits_the_harness_lines_as_the_shell_does() {
    assert_eq!(
        commands(r#"  aa install cn-agent -s "$S1" > "$1/out" 2>&1 || { echo "x $?"; return 1; }"#),
        vec![
            (
                "aa".to_string(),
                ["install", "cn-agent", "-s", "$S1"]
                    .map(String::from)
                    .to_vec()
            ),
            ("echo".to_string(), vec!["x $?".to_string()]),
            ("return".to_string(), vec!["1".to_string()]),
        ]
    );
    assert_eq!(
        commands(r#"run=$(aa --json history | python3 -c 'print(1)')"#),
        vec![
            (
                "aa".to_string(),
                vec!["--json".to_string(), "history".to_string()]
            ),
            (
                "python3".to_string(),
                vec!["-c".to_string(), "print(1)".to_string()]
            ),
        ]
    );
    assert_eq!(
        commands(r#"if out=$(RT_X=1 aa list 2> /dev/null); then :; fi"#)[0],
        ("aa".to_string(), vec!["list".to_string()])
    );
    let lookup = |n: &str| (n == "S1").then(|| vec!["u1".to_string()]);
    assert_eq!(
        expand("--x=${S1}/a", &lookup),
        Ok(vec!["--x=u1/a".to_string()])
    );
    assert_eq!(expand("$S2", &lookup), Err("$S2".to_string()));
}
