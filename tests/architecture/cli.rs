//! The command line is organised by command (issue 31), and stays so:
//! one module per command under `crates/cli/src/commands/`, none using
//! another (what they share lives beside that directory); the environment
//! read only where settings are resolved (`settings.rs`, `lib.rs`), and
//! never in the orchestrator, which they hand it to; and no
//! blocking process, file or sleep call in a command's code (they run on
//! the async runtime: files through `spawn_blocking` or `tokio::fs`,
//! processes through `tokio::process`).

use std::path::{Path, PathBuf};

use super::{code_only, module_graph, root, rust_files};

fn cli_src() -> PathBuf {
    root().join("crates/cli/src")
}

/// The commands: the files and directories under `commands/`.
fn commands() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cli_src().join("commands"))
        .expect("commands/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .filter(|n| n != "mod" && n != "snapshots")
        .collect();
    names.sort();
    names
}

/// The code of every file under `dir` (comments and literals blanked),
/// test modules left in: a test may not read the environment either.
fn code_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("readable");
            (f, code_only(&text))
        })
        .collect()
}

#[test]
fn the_command_line_has_one_module_per_command() {
    let names = commands();
    assert!(names.len() >= 18, "{} commands: {names:?}", names.len());
    for expected in [
        "adopt",
        "avail",
        "check",
        "disable",
        "enable",
        "gz",
        "history",
        "hold",
        "install",
        "installer",
        "list",
        "plan",
        "release",
        "remove",
        "revert",
        "self_update",
        "server",
        "update",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected}: {names:?}");
    }
}

#[test]
fn no_command_uses_another() {
    let graph = module_graph(&cli_src(), 2);
    let mut arrows = Vec::new();
    for (from, targets) in &graph {
        if !from.starts_with("commands::") {
            continue;
        }
        for to in targets {
            if to.starts_with("commands::") {
                arrows.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        arrows.is_empty(),
        "commands using other commands (move what they share beside commands/): {arrows:?}"
    );
    // The scanner sees the commands at all.
    assert!(graph.keys().filter(|k| k.starts_with("commands::")).count() >= 18);
}

#[test]
fn the_environment_is_read_only_where_settings_are_resolved() {
    let src = cli_src();
    let mut readers = Vec::new();
    for (file, code) in code_under(&src) {
        let rel = file.strip_prefix(&src).expect("under src");
        if rel == Path::new("settings.rs") || rel == Path::new("lib.rs") {
            continue;
        }
        if code.contains("env::var") || code.contains("env::args") {
            readers.push(rel.display().to_string());
        }
    }
    assert!(
        readers.is_empty(),
        "environment read outside settings: {readers:?}"
    );
}

/// The orchestrator reads no environment (issue 31): what a run needs
/// from outside (the history's directories, the operator, the login the
/// lock names its owner by) the command line's settings resolve and hand
/// in. `lock::this_owner()` read `USER`/`LOGNAME` inside the lock until
/// this session.
#[test]
fn the_orchestrator_reads_no_environment() {
    let src = root().join("crates/orchestrate/src");
    let readers: Vec<String> = code_under(&src)
        .into_iter()
        .filter(|(_, code)| code.contains("env::var"))
        .map(|(file, _)| {
            file.strip_prefix(&src)
                .expect("under src")
                .display()
                .to_string()
        })
        .collect();
    assert!(
        readers.is_empty(),
        "environment read in the orchestrator (resolve it in crates/cli/src/settings.rs and pass it in): {readers:?}"
    );
    // The scanner sees the orchestrator at all.
    assert!(code_under(&src).len() >= 20);
}

#[test]
fn no_blocking_call_in_a_commands_code() {
    let src = cli_src();
    let mut found = Vec::new();
    for (file, code) in code_under(&src.join("commands")) {
        for call in ["std::process::Command", "std::fs", "thread::sleep"] {
            if code.contains(call) {
                let rel = file.strip_prefix(&src).expect("under src");
                found.push(format!("{}: {call}", rel.display()));
            }
        }
    }
    assert!(found.is_empty(), "blocking calls on the runtime: {found:?}");
}
