//! The workspace's layers, checked from the manifests and from cargo's own
//! resolution of the server's build.
//!
//! Each layer is a crate, so a wrong-way `use` does not compile; what the
//! compiler cannot know is which arrows are allowed at all (a new
//! `agentsadm-orchestrate = …` line in `crates/gz/Cargo.toml` would
//! compile). These tests pin the arrows, and that the binary shipped to
//! servers has none of the simulator, its fakes, its test knobs or axum in
//! its dependency graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Every crate of the workspace with the crates it may depend on (directly).
/// Product layers first, bottom up; then the two beside the product.
const LAYERS: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("api", &["types"]),
    ("platform", &["types"]),
    ("plan", &["types", "api"]),
    ("gz", &["types", "api", "platform"]),
    ("orchestrate", &["types", "api", "plan"]),
    (
        "flows",
        &["types", "api", "platform", "gz", "plan", "orchestrate"],
    ),
    (
        "cli",
        &[
            "types",
            "api",
            "platform",
            "gz",
            "plan",
            "orchestrate",
            "flows",
        ],
    ),
    (
        "sim",
        &[
            "types",
            "api",
            "platform",
            "gz",
            "plan",
            "orchestrate",
            "flows",
            "cli",
        ],
    ),
    (
        "dev",
        &[
            "types",
            "api",
            "platform",
            "gz",
            "plan",
            "orchestrate",
            "flows",
            "cli",
            "sim",
        ],
    ),
];

/// Crates that must never be in the server's build.
const SIM_SIDE: &[&str] = &["agentsadm-sim", "agentsadm-dev", "axum"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `agentsadm-*` crates a manifest's `[dependencies]` table names
/// (dev-dependencies are free: tests may use anything).
fn internal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some(rest) = line.strip_prefix("agentsadm-") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_crate_depends_only_on_the_layers_below_it() {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut on_disk = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/ is readable") {
        let entry = entry.expect("dir entry");
        on_disk.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let known: BTreeSet<String> = allowed.keys().map(|s| s.to_string()).collect();
    assert_eq!(
        on_disk, known,
        "crates/ and this test's layer table must name the same crates"
    );
    let mut violations = Vec::new();
    for (name, may) in &allowed {
        let manifest = std::fs::read_to_string(root().join("crates").join(name).join("Cargo.toml"))
            .expect("manifest readable");
        for dep in internal_dependencies(&manifest) {
            if !may.contains(&dep.as_str()) {
                violations.push(format!(
                    "agentsadm-{name} must not depend on agentsadm-{dep}"
                ));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_manifest_scanner_reads_only_the_dependencies_table() {
    let deps = internal_dependencies(
        "[package]\nname = \"agentsadm-gz\"\n\n[dependencies]\nagentsadm-types = { path = \"../types\" }\nagentsadm-api.workspace = true\nserde = \"1\"\n\n[dev-dependencies]\nagentsadm-sim = { path = \"../sim\" }\n",
    );
    let want: BTreeSet<String> = ["types", "api"].iter().map(|s| s.to_string()).collect();
    assert_eq!(deps, want);
}

/// `cargo tree` of the server's build (`-p agentsadm --no-default-features`),
/// normal and build dependencies, with features.
fn server_build_tree() -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "-p",
            "agentsadm",
            "--no-default-features",
            "-e",
            "normal,build,features",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_server_build_has_no_simulator_fakes_or_test_knobs() {
    let tree = server_build_tree();
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains("agentsadm-cli"), "{tree}");
    for name in SIM_SIDE {
        assert!(
            !crates.contains(name),
            "{name} is in the server's build:\n{tree}"
        );
    }
    // Features only the simulator's crate turns on: the installer's test
    // knobs, and the command line's in-process entry points.
    for feature in ["\"test-knobs\"", "\"in-process\""] {
        assert!(
            !tree.contains(feature),
            "feature {feature} is on in the server's build:\n{tree}"
        );
    }
}
