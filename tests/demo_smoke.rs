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
    let has = |s: &str| assert!(out.contains(s), "missing {s:?} in:\n{out}");

    for n in 1..=11 {
        has(&format!("=== [{n}/11] "));
    }
    // Act 2: the new servers, set up through CNAPI, adopted.
    for h in &cast.new_servers {
        has(&format!("# {h}: setup job "));
    }
    let listed = last_section(
        &out,
        &format!("$ agentsadm list -s {}", cast.new_servers.join(",")),
    );
    assert!(
        listed.lines().filter(|l| l.ends_with(" ok")).count() >= 2 * 12,
        "{listed}"
    );
    // Act 3 and 4.
    has("$ agentsadm list --summary");
    has("$ agentsadm install marlin-agent -s cn0003,cn0004,cn0005 -y");
    has("restarting it aborts running Manta jobs");
    // Act 7: the bad vm-agent build goes to maintenance on the canary,
    // which is reverted; the rollout halts with no other server started.
    let bad = last_section(
        &out,
        "$ agentsadm update vm-agent --latest -C release -y --canary 1 --outlier-factor 2 --outlier-margin 1s",
    );
    assert!(
        bad.contains(&format!("Failed:\n  {} (", cast.canary))
            && bad.contains("unhealthy")
            && bad.contains("maintenance")
            && bad.contains("reverted"),
        "{bad}"
    );
    assert!(
        bad.contains(&format!(
            "canary failed on {}: halted before any other server was touched",
            cast.canary
        )),
        "{bad}"
    );
    assert!(
        bad.contains("Canary cn0001 failed; 1 failure of a failure budget of 1."),
        "{bad}"
    );
    assert!(bad.contains("(1 failed, 12 not started)"), "{bad}");
    assert!(bad.contains("(exit status 2)"), "{bad}");
    has("Servers CNAPI shows running vm-agent 1.1.0: 0.");
    has("# SAPI's vm-agent default for new servers: the previous image (");
    // Act 8: the fixed build; the plan skips marlin-agent and shows the
    // racks and each step's gate; the canary passes; the update warns
    // about the slow servers and reports the failing one with its remote
    // error, within the budget.
    has("marlin-agent: never updated in bulk");
    let plan = last_section(&out, "$ agentsadm plan update --all --latest -C release");
    assert!(
        plan.contains("vm-agent 1.0.0") && plan.contains("-> 1.1.1"),
        "{plan}"
    );
    assert!(plan.contains("\nRacks:\n"), "{plan}");
    assert!(
        plan.contains("\nHealth gates (")
            && plan.contains("  health gate after install-agent (gz health through execute)"),
        "{plan}"
    );
    let update = last_section(
        &out,
        "$ agentsadm update --all --latest -C release -y --canary 1 --max-per-rack 8 --outlier-factor 2 --outlier-margin 1s",
    );
    // cn0001 failed the bad build: the plan passes it over as canary.
    assert!(
        update.contains(&format!("canary passed on {}", cast.next_canary)),
        "{update}"
    );
    assert!(
        update.contains("Canary cn0002 passed; 1 failure of a failure budget of 1."),
        "{update}"
    );
    assert!(!update.contains("halted"), "{update}");
    // Only slow servers are flagged as outliers. Whether each is flagged
    // before it finishes depends on the machine's load (on a loaded 2-core
    // machine, load 16, the ordinary servers' median nears the slow ones'
    // time): that is timing, not the story, so it is not asserted.
    for line in update
        .lines()
        .filter(|l| l.contains(") is slow: running for"))
    {
        assert!(
            cast.slow
                .iter()
                .any(|h| line.contains(&format!("warning: {h} ("))),
            "an outlier warning for a server that is not slow: {line}\n{update}"
        );
    }
    assert!(
        update.contains(&format!("Failed:\n  {} (", cast.failing)),
        "{update}"
    );
    assert!(
        update.contains(&format!(
            "injected failure installing config-agent on {}",
            cast.failing
        )),
        "{update}"
    );
    assert!(update.contains("(exit status 2)"), "{update}");
    // Act 8: drift on the failing server, fixed, clean.
    let first_check = &out[out.find("\n$ agentsadm check\n").expect("check")..];
    assert!(
        first_check.contains(&format!("{} (", cast.failing))
            && first_check.contains("wrong-image config-agent"),
        "{first_check}"
    );
    has("$ agentsadm check --fix -y");
    let last_check = last_section(&out, "$ agentsadm check\n");
    assert!(last_check.contains("No drift found"), "{last_check}");
    assert!(!last_check.contains("exit status"), "{last_check}");
    // Act 9: the deleted server's instances are gone, CNAPI forgot it.
    has(&format!("$ agentsadm server delete {} -y", cast.deleted));
    // A compute node's default set: 12 agents and agentsadm.
    has("Deleted 13 SAPI instances (0 already gone, 0 failed).");
    has(&format!(
        "# SAPI agent instances of {} now: 0; CNAPI GET /servers/",
        cast.deleted
    ));
    has("answers 404 for it.");
    // Act 10.
    // The canary failed once (the bad build), the failing server once.
    has(&format!(
        "Failed servers: {}, {}.",
        cast.canary, cast.failing
    ));
    has(", exact.");
    has("Total: ");
    assert!(!out.contains("unexpected:"), "{out}");
}

#[test]
fn too_few_servers_is_refused_before_anything_starts() {
    let (code, out) = run(&["demo", "--servers", "5"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("the demo needs at least 12 compute nodes, not 5"),
        "{out}"
    );
    assert!(!out.contains("==="), "nothing ran: {out}");
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
        assert!(
            out.contains(&format!("# Exit status 2: the canary ({canary}) passed")),
            "round {round}: {canary}\n{out}"
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
