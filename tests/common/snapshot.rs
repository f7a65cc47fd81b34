//! Snapshots of what operators read (insta), the one helper every suite
//! uses: plans, tables, summaries, history and errors are checked whole,
//! so a reworded, reordered or missing line fails where a substring check
//! would pass.
//!
//! - [`snapshot!`]`(name, text)`: exact, for what is the same on every
//!   run (the planner's output on the example datacenter, whose UUIDs are
//!   derived from names).
//! - [`masked_snapshot!`]`(name, text)`: with [`masks`] applied, for
//!   output of a run against the simulator: times, durations, random
//!   UUIDs, run ids, who (the operator, user@host) and where (temporary
//!   and simulator paths),
//!   timeline bars, seconds in `--json`.
//!   Nothing else is masked.
//!
//! Both are macros so that insta files the snapshot beside the calling
//! test (`snapshots/<name>.snap` next to it), under the name given.
//!
//! CI never writes a snapshot: under `CI=true` insta's default
//! (`INSTA_UPDATE` unset, "auto") only compares, and a mismatch or a
//! missing snapshot fails. After an intended change of output, locally:
//! `cargo insta review`, or `INSTA_UPDATE=always cargo test ...` and read
//! the diff of `snapshots/`. `.snap.new` files are never committed
//! (architecture: no_pending_snapshot_is_committed).

#![allow(dead_code, unused_macros, unused_imports)]

/// What differs between two runs of the same story, and its mask.
pub fn masks() -> Vec<(String, &'static str)> {
    // Who ran it, as the lock and history write it (`user@host:pid`, and
    // the host alone): the user and host of whoever runs the tests.
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .unwrap_or_else(|| "root".to_string());
    let host = agentsadm_types::log::hostname();
    // Who made a change, as marks, holds and history name them: the
    // operator the command line resolves (SUDO_USER, LOGNAME, USER, else
    // root), whoever runs the tests.
    let operator = ["SUDO_USER", "LOGNAME", "USER"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "root".to_string());
    let mut masks: Vec<(String, &'static str)> = vec![
        // Runs built in a test name no login (the orchestrator reads no
        // environment), so theirs is root's.
        (format!(r"\b(?:{user}|root)@{host}(:\d+)?"), "[WHO]"),
        (format!(r"\({host}\)"), "([HOST])"),
        (format!(r"\bby {operator} at\b"), "by [OPERATOR] at"),
        (
            format!(r#""user": "{operator}""#),
            r#""user": "[OPERATOR]""#,
        ),
    ];
    // Run logs and state directories of the tests, wherever temporary
    // files go on this machine.
    let tmp = std::env::temp_dir()
        .to_string_lossy()
        .trim_end_matches('/')
        .to_string();
    if !tmp.is_empty() && tmp != "/tmp" {
        masks.push((format!(r"{tmp}/[^\s'\x22)]+"), "[PATH]"));
    }
    // The simulator's server directories (its default_temp_base:
    // $AGENTSADM_SIM_TMPDIR, else /dev/shm), named where a message names a
    // server's root.
    if let Some(dir) = std::env::var_os("AGENTSADM_SIM_TMPDIR") {
        let dir = dir.to_string_lossy().trim_end_matches('/').to_string();
        if !dir.is_empty() {
            masks.push((format!(r"{dir}/[^\s'\x22)]+"), "[PATH]"));
        }
    }
    masks.push((r"/dev/shm/[^\s'\x22)]+".to_string(), "[PATH]"));
    masks.extend(
        [
            (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
            (r"127\.0\.0\.1:\d+", "[HOST:PORT]"),
            (r"/tmp/[^\s'\x22)]+", "[PATH]"),
            (r"\b\d+m\d\ds\b", "[DURATION]"),
            (r"\b\d+(\.\d+)?(ms|s)\b", "[DURATION]"),
            // Seconds in --json documents.
            (
                r#""(elapsed|elapsed_s|started_s|took_s|gates_s|gate_s|p50|p90|max)": [0-9.]+"#,
                r#""$1": [SECONDS]"#,
            ),
            (
                r"\b[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\b",
                "[UUID]",
            ),
            (r"(run|history|revert|Run) [0-9a-f]{8}\b", "$1 [RUN]"),
            // A run's short id, first in each row of `history`.
            (r"(?m)^[0-9a-f]{8}\b", "[RUN]"),
            // A timeline's bars are as long as each server took, and the
            // spread of install times is drawn from them.
            (r"\|[ .=#CcRrFfSsx*+!?-]*\|", "|[BAR]|"),
            (r"(how many took how long:).*", "$1 [SPREAD]"),
            // A table's columns are as wide as their widest cell, and a
            // duration's width varies: runs of spaces between cells count
            // as two (indentation is kept).
            (r"(\S) {2,}", "$1  "),
        ]
        .map(|(re, with)| (re.to_string(), with)),
    );
    masks
}

/// insta's settings for a snapshot: the name as given (no module prefix),
/// with [`masks`] when `masked`.
pub fn settings(masked: bool) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    if masked {
        for (re, with) in masks() {
            settings.add_filter(&re, with);
        }
    }
    settings
}

/// What [`command_snapshot!`] snapshots of one command: the command line,
/// its stdout, and its stderr when it failed (its error). A run's
/// progress lines on stderr come in the order servers finish, so a
/// command that succeeded is shown without them. Panics unless it exited
/// `code`.
pub fn command_text(ran: (i32, String, String), args: &[&str], code: i32) -> String {
    let (got, out, err) = ran;
    assert_eq!(
        got,
        code,
        "`agentsadm {}` exited {got}:\n{out}\n{err}",
        args.join(" ")
    );
    let mut text = format!("$ agentsadm {}\n{out}", args.join(" "));
    if code != 0 && !err.trim().is_empty() {
        text.push_str(&format!("--- stderr\n{err}"));
    }
    text
}

/// Run `args` with `cli` (the suite's `Agentsadm`), expect exit status
/// `code`, and assert [`command_text`] (masked) is the snapshot `name`.
macro_rules! command_snapshot {
    ($cli:expr, $name:expr, $args:expr, $code:expr) => {{
        let args: &[&str] = $args;
        let text = $crate::snapshot::command_text($cli.run(args).await, args, $code);
        $crate::snapshot::masked_snapshot!($name, text)
    }};
}

/// Assert `text` is the snapshot `name`, exactly.
macro_rules! snapshot {
    ($name:expr, $text:expr) => {{
        let text: &str = &$text;
        $crate::snapshot::settings(false).bind(|| insta::assert_snapshot!($name, text))
    }};
}

/// Assert `text`, with [`masks`] applied, is the snapshot `name`.
macro_rules! masked_snapshot {
    ($name:expr, $text:expr) => {{
        let text: &str = &$text;
        $crate::snapshot::settings(true).bind(|| insta::assert_snapshot!($name, text))
    }};
}

pub(crate) use command_snapshot;
pub(crate) use masked_snapshot;
pub(crate) use snapshot;
