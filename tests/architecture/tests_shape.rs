//! The shape of the tests themselves (issue 31): the planner has a test
//! loop of its own, no test outside the orchestrator builds an executor,
//! and snapshots are only ever written by a person, never by CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{code_only, root, rust_files};

/// `cargo test -p agentsadm-plan` builds the planner, agentsadm-types and
/// their dependencies and dev-dependencies: no simulator, no CLI, no
/// orchestrator, and none of the async runtime or HTTP stack (the wire
/// types it reads live in agentsadm-types; its example datacenter is its
/// own, behind the `example` feature).
#[test]
fn the_planners_tests_build_without_the_simulator_cli_or_tokio() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "-p", "agentsadm-plan"])
        .args(["-e", "normal,dev", "--prefix", "none"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("utf-8");
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let ours: BTreeSet<&str> = crates
        .iter()
        .copied()
        .filter(|c| c.starts_with("agentsadm"))
        .collect();
    assert_eq!(
        ours,
        BTreeSet::from(["agentsadm-plan", "agentsadm-types"]),
        "the planner's tests build other workspace crates:\n{tree}"
    );
    for name in ["tokio", "reqwest", "hyper", "axum"] {
        assert!(
            !crates.contains(name),
            "the planner's tests build {name}:\n{tree}"
        );
    }
}

/// Files of `dir` (recursively) whose name ends with one of `endings`,
/// skipping build output and git's own directory.
fn files_ending(dir: &Path, endings: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                files_ending(&path, endings, out);
            }
        } else if endings.iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .expect("under the root")
        .to_string_lossy()
        .replace('\\', "/")
}

/// No test builds an executor: tests on the fake datacenter, as those on
/// the simulator, carry plans out through the one run the binary goes
/// through (`Run::on` with the fake as its datacenter, a scripted
/// operator), so they prove the path the binary takes: the lock, the plan
/// made again under it, `-y` or the answers, the history entry. (The
/// executor's own unit tests stay inside the orchestrator crate; the
/// product's one door is `only_the_run_builds_an_executor`.)
#[test]
fn no_test_outside_the_orchestrator_builds_an_executor() {
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    for dir in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let dir = dir.expect("dir entry").path();
        if dir.ends_with("orchestrate") {
            continue;
        }
        let tests = dir.join("tests");
        if tests.is_dir() {
            rust_files(&tests, &mut files);
        }
    }
    files.sort();
    let mut builders = Vec::new();
    for file in files {
        let rel = relative(&file);
        if rel == "tests/architecture/tests_shape.rs" {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).expect("readable"));
        if ["Executor::new(", ".execute_gated(", "fn executor("]
            .iter()
            .any(|door| code.contains(door))
        {
            builders.push(rel);
        }
    }
    assert!(
        builders.is_empty(),
        "tests that build or drive an executor themselves (carry the plan out through Run: tests/common/sim.rs run_on): {builders:?}"
    );
}

/// Snapshots are written by a person (`cargo insta review`), never by CI:
/// no pending snapshot (`.snap.new`, `.pending-snap`) is in the tree, and
/// nothing the CI runs sets insta to write or to pass regardless
/// (`INSTA_UPDATE`, `INSTA_FORCE_PASS`, an insta.yaml), so under
/// `CI=true` a changed or missing snapshot fails.
#[test]
fn no_pending_snapshot_is_committed_and_ci_never_writes_one() {
    let mut pending = Vec::new();
    files_ending(root(), &[".snap.new", ".pending-snap"], &mut pending);
    let pending: Vec<String> = pending.iter().map(|p| relative(p)).collect();
    assert!(
        pending.is_empty(),
        "pending snapshots (review them with `cargo insta review`, or delete them): {pending:?}"
    );
    let mut config = Vec::new();
    files_ending(root(), &["insta.yaml", "insta.yml"], &mut config);
    let config: Vec<String> = config.iter().map(|p| relative(p)).collect();
    assert!(config.is_empty(), "insta configuration files: {config:?}");
    let mut places = vec![
        root().join(".ci/run"),
        root().join("Makefile"),
        root().join("Cargo.toml"),
        root().join(".cargo/config.toml"),
        root().join(".cargo/config"),
    ];
    rust_files(&root().join("tests"), &mut places);
    rust_files(&root().join("crates"), &mut places);
    let mut setters = Vec::new();
    for place in places {
        let Ok(text) = std::fs::read_to_string(&place) else {
            continue;
        };
        if relative(&place) == "tests/architecture/tests_shape.rs" {
            continue;
        }
        for line in text.lines() {
            let code = line.split('#').next().unwrap_or_default();
            let code = code.split("//").next().unwrap_or_default();
            if code.contains("INSTA_UPDATE") || code.contains("INSTA_FORCE_PASS") {
                setters.push(format!("{}: {}", relative(&place), line.trim()));
            }
        }
    }
    assert!(
        setters.is_empty(),
        "insta told to write or pass snapshots: {setters:?}"
    );
}
