//! `agentsadm demo` end to end with the built binary on a small datacenter:
//! it exits 0 and every act shows its key lines (the Manta warning, the
//! bad build caught by its canary, reverted there and the rollout halted,
//! the fixed build rolled out with a canary, racks and a failure budget,
//! outlier warnings only for slow servers, the failure report naming the
//! failing server, the check clean after the fix, the delete's cleanup,
//! the exact census); and it runs twice over one account state, which it
//! never touches.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentsadm_dev::demo::Cast;

#[path = "common/snapshot.rs"]
mod snapshot;

const BIN: &str = env!("CARGO_BIN_EXE_agentsadm");

/// Catches a hang; the run itself takes about ten seconds.
const HANG_TIMEOUT: Duration = Duration::from_secs(180);

/// Run the binary with stdout and stderr in one stream (as on a terminal,
/// progress lines among the command output), stdin closed.
fn run(args: &[&str]) -> (Option<i32>, String) {
    // Run logs go to a directory of the test's own, never the developer's
    // home.
    let state = tempfile::tempdir().expect("state dir");
    run_in(state.path(), args)
}

/// [`run`] with `$XDG_STATE_HOME` at `state`: the account's state.
fn run_in(state: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = Command::new(BIN);
    cmd.env("XDG_STATE_HOME", state);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("pipe clone"))
        .stderr(writer);
    for v in ["SAPI_URL", "CNAPI_URL", "IMGAPI_URL", "UPDATES_URL"] {
        cmd.env_remove(v);
    }
    let mut child = cmd.spawn().expect("agentsadm runs");
    // The command holds the only write ends now.
    drop(cmd);
    let reading = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = reader.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + HANG_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agentsadm {args:?} did not finish in {HANG_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), reading.join().expect("reader"))
}

/// The text from the last line starting with `start` to the next `$ ` or
/// `=== ` line.
fn last_section<'a>(out: &'a str, start: &str) -> &'a str {
    let from = out
        .rfind(&format!("\n{start}"))
        .unwrap_or_else(|| panic!("no {start:?} in the output:\n{out}"))
        + 1;
    let rest = &out[from..];
    let end = rest[1..]
        .find("\n$ ")
        .into_iter()
        .chain(rest[1..].find("\n=== "))
        .min()
        .map(|i| i + 1)
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Act `n` of the story: from its `=== [n/11] ` line to the next act,
/// with the builds the demo publishes masked ([`mask_new_builds`]).
fn act(out: &str, n: usize) -> String {
    let head = format!("=== [{n}/11] ");
    let from = out
        .find(&head)
        .unwrap_or_else(|| panic!("no act {n} in the output:\n{out}"));
    let rest = &out[from..];
    let end = rest[1..].find("\n=== [").map_or(rest.len(), |i| i + 2);
    sort_block(
        &mask_new_builds(&rest[..end]),
        "Import into the datacenter IMGAPI:",
    )
}

/// `text` with the lines under `header` (to the next blank line) sorted:
/// the plan lists its imports by image UUID, and the demo's new builds
/// have random ones, so their order differs from run to run.
fn sort_block(text: &str, header: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let mut inside = false;
    for line in text.split('\n') {
        if inside && !line.is_empty() {
            block.push(line);
            continue;
        }
        block.sort_unstable();
        out.append(&mut block);
        inside = line == header;
        out.push(line);
    }
    block.sort_unstable();
    out.append(&mut block);
    out.join("\n")
}

/// The demo publishes its new builds (stamped March 2026) with random
/// image UUIDs, and a build's version ends in `-g` and the UUID's first 7
/// digits; its short id is the first 8. Both are `[BUILD]` here (the
/// whole UUID is masked by the snapshot's own masks). The seeded images'
/// ids are fixed and stay.
fn mask_new_builds(text: &str) -> String {
    let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    let mut ids = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("-master-202603") {
        let tail = &text[at..];
        let Some(g) = tail.find("Z-g") else { continue };
        let id = tail.get(g + 3..g + 10).unwrap_or_default();
        if id.len() == 7 && id.bytes().all(hex) {
            ids.insert(id.to_string());
        }
    }
    let mut out = text.to_string();
    for id in ids {
        let mut masked = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(&id) {
            let after = &rest.as_bytes()[at + id.len()..];
            // `-g<7>` in a version; `<8>` alone (not a UUID's first group).
            let short = after.first().is_some_and(|c| hex(*c))
                && !after.get(1).is_some_and(|c| hex(*c) || *c == b'-');
            let version = rest[..at].ends_with("-g");
            let len = if short { id.len() + 1 } else { id.len() };
            masked.push_str(&rest[..at]);
            if short || version {
                masked.push_str("[BUILD]");
            } else {
                masked.push_str(&rest[at..at + len]);
            }
            rest = &rest[at + len..];
        }
        masked.push_str(rest);
        out = masked;
    }
    out
}

#[test]
fn the_story_runs_on_twelve_servers() {
    let cast = Cast::new(12).unwrap();
    let (code, out) = run(&["demo", "--servers", "12"]);
    // The narration names the canaries the plans picked.
    has_line(
        &out,
        &format!(
            "# Caught at the canary: vm-agent went to maintenance on {}, ",
            cast.canary
        ),
    );
    assert_eq!(code, Some(0), "{out}");
    // The acts whose output does not depend on the order servers finish
    // in are checked whole (masked: times, durations, UUIDs, ports).
    // Act 1 names the simulator's directory, act 4 and the rollout of
    // act 8 report servers as they finish.
    for n in 1..=11 {
        has_line(&out, &format!("=== [{n}/11] "));
    }
    // Act 2: the new servers, set up through CNAPI, adopted.
    snapshot::masked_snapshot!("demo_act2_setup", act(&out, 2));
    snapshot::masked_snapshot!("demo_act3_fleet", act(&out, 3));
    snapshot::masked_snapshot!("demo_act5_new_builds", act(&out, 5));
    // Act 7: the bad vm-agent build goes to maintenance on the canary,
    // which is reverted; the rollout halts with no other server started.
    snapshot::masked_snapshot!("demo_act7_bad_build_halted", act(&out, 7));
    // Act 8: the fixed build; the plan skips marlin-agent and shows the
    // racks and each step's gate.
    let plan = last_section(&out, "$ agentsadm plan update --all --latest -C release");
    snapshot::masked_snapshot!(
        "demo_act8_plan",
        sort_block(&mask_new_builds(plan), "Import into the datacenter IMGAPI:")
    );
    // The update itself: the canary passes; the update warns about the
    // slow servers and reports the failing one with its remote error,
    // within the budget. Its progress lines come in the order servers
    // finish, so its lines are looked for (partial matching is the
    // point), each whole where it can be.
    let update = last_section(
        &out,
        "$ agentsadm update --all --latest -C release -y --canary 1 --max-per-rack 8 --outlier-factor 2 --outlier-margin 1s",
    );
    let lines: Vec<&str> = update.lines().collect();
    let has = |line: &str| {
        assert!(lines.contains(&line), "no line {line:?} in:\n{update}");
    };
    // cn0001 failed the bad build: the plan passes it over as canary.
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "canary passed on {}: continuing with 12 servers",
            cast.next_canary
        ))),
        "{update}"
    );
    has("Canary cn0002 passed; 1 failure of a failure budget of 1.");
    has("(exit status 2)");
    assert!(lines.iter().all(|l| !l.starts_with("halted")), "{update}");
    // Only slow servers are flagged as outliers. Whether each is flagged
    // before it finishes depends on the machine's load (on a loaded 2-core
    // machine, load 16, the ordinary servers' median nears the slow ones'
    // time): that is timing, not the story, so it is not asserted.
    for line in lines
        .iter()
        .filter(|l| l.starts_with("warning: ") && l.contains(") is slow: running for"))
    {
        assert!(
            cast.slow
                .iter()
                .any(|h| line.starts_with(&format!("warning: {h} ("))),
            "an outlier warning for a server that is not slow: {line}\n{update}"
        );
    }
    // The failure report: the server, the component, the remote error.
    let failed = update
        .split("\nFailed:\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no failure report in:\n{update}"));
    assert!(
        failed.starts_with(&format!("  {} (", cast.failing))
            && failed.ends_with(&format!(
                "injected failure installing config-agent on {}",
                cast.failing
            )),
        "{failed}"
    );
    // Act 9: drift on the failing server, fixed, clean.
    snapshot::masked_snapshot!("demo_act9_check_fix_check", act(&out, 9));
    // Act 10: the deleted server's instances are gone, CNAPI forgot it
    // (a compute node's default set: 12 agents and agentsadm).
    snapshot::masked_snapshot!("demo_act10_server_delete", act(&out, 10));
    // Act 11: which servers were flagged slow depends on the load (see
    // above); the rest of the summary is looked for line by line.
    let summary = act(&out, 11);
    // The canary failed once (the bad build), the failing server once.
    has_line(
        &summary,
        &format!("Failed servers: {}, {}.", cast.canary, cast.failing),
    );
    assert!(
        summary
            .lines()
            .any(|l| l.starts_with("SAPI agent instances: ") && l.ends_with(", exact.")),
        "{summary}"
    );
    has_line(&summary, "Total: ");
    // Nothing the story did not expect, anywhere in it.
    assert!(!out.contains("unexpected:"), "{out}");
}

#[test]
fn too_few_servers_is_refused_before_anything_starts() {
    let (code, out) = run(&["demo", "--servers", "5"]);
    assert_eq!(code, Some(1), "{out}");
    // The refusal, whole: nothing ran.
    snapshot::masked_snapshot!("demo_too_few_servers", out);
}

/// The README's first command on a machine where agentsadm (and the demo)
/// ran before: the demo keeps its history and run logs in a directory of
/// its own, so a second run over the same account state tells the same
/// story, and the account's state is never read or written. (An earlier
/// demo's history, whose servers have the same UUIDs, made the server whose
/// installs fail the canary of the next one.) The narration names the
/// canary the plan picked.
#[test]
fn the_demo_runs_twice_over_the_same_state_and_leaves_it_alone() {
    let state = tempfile::tempdir().expect("state dir");
    // What an earlier agentsadm left: an empty history directory.
    std::fs::create_dir_all(state.path().join("agentsadm/history")).unwrap();
    let listing = |dir: &std::path::Path| -> Vec<String> {
        walk(dir)
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    };
    let before = listing(state.path());
    for round in 1..=2 {
        let (code, out) = run_in(state.path(), &["demo", "--servers", "12"]);
        assert_eq!(code, Some(0), "round {round}:\n{out}");
        // Nothing the story did not expect, anywhere in it.
        assert!(!out.contains("unexpected:"), "round {round}:\n{out}");
        assert_eq!(listing(state.path()), before, "round {round} wrote there");
        // The narration names the server the plan made the canary.
        let update = last_section(
            &out,
            "$ agentsadm update --all --latest -C release -y --canary 1 --max-per-rack 8 --outlier-factor 2 --outlier-margin 1s",
        );
        let canary = update
            .split("canary passed on ")
            .nth(1)
            .and_then(|r| r.split([' ', ':', '\n', ';']).next())
            .unwrap_or_else(|| panic!("no canary in:\n{update}"));
        has_line(
            &out,
            &format!("# Exit status 2: the canary ({canary}) passed"),
        );
    }
}

/// Every path under `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out.sort();
    out
}

/// `out` has a line starting with `start`.
fn has_line(out: &str, start: &str) {
    assert!(
        out.lines().any(|l| l.starts_with(start)),
        "no line starting {start:?} in:\n{out}"
    );
}
