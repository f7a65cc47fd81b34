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
    build_tree(&["-p", "agentsadm", "--no-default-features"])
}

/// `cargo tree` of what a `cargo build` with `selection` (the package and
/// feature arguments) builds, with the features cargo resolves for all of
/// it together: what is unified into the binary.
fn build_tree(selection: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline"])
        .args(selection)
        .args(["-e", "normal,build,features", "--prefix", "none"])
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
    assert_server_tree(
        &server_build_tree(),
        "cargo build -p agentsadm --no-default-features",
    );
}

/// Every command the README and the Makefile give for the server's build
/// (a `cargo build` with `--no-default-features`) selects what the server
/// build is, as cargo resolves it: `cargo build --release
/// --no-default-features` at the root once built every workspace member,
/// and the simulator's test switches were unified into the binary.
#[test]
fn every_documented_server_build_command_builds_the_server_build() {
    let mut commands = Vec::new();
    for file in ["README.md", "Makefile"] {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default();
            let words: Vec<&str> = line
                .split_whitespace()
                .map(|w| if w == "$(NAME)" { "agentsadm" } else { w })
                .collect();
            let Some(at) = words.windows(2).position(|w| {
                (w[0] == "cargo" || w[0] == "$(CARGO)" || w[0] == "`cargo") && w[1] == "build"
            }) else {
                continue;
            };
            // The flags, and the package after -p; the rest of the line
            // is prose or another command.
            let mut args: Vec<String> = Vec::new();
            for w in words[at + 2..].iter().map(|w| w.trim_matches('`')) {
                let value_of_p = args.last().is_some_and(|a| a == "-p");
                if !(w.starts_with('-') || value_of_p) {
                    break;
                }
                if !["--release", "--locked"].contains(&w) {
                    args.push(w.to_string());
                }
            }
            if args.iter().any(|a| a == "--no-default-features") {
                commands.push((file, args));
            }
        }
    }
    assert!(
        commands.iter().any(|(f, _)| *f == "README.md")
            && commands.iter().any(|(f, _)| *f == "Makefile"),
        "no server-build command found: {commands:?}"
    );
    for (file, args) in commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_server_tree(
            &build_tree(&args),
            &format!("{file}: cargo build {}", args.join(" ")),
        );
    }
}

fn assert_server_tree(tree: &str, what: &str) {
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains("agentsadm-cli"), "{what}: {tree}");
    for name in SIM_SIDE {
        assert!(
            !crates.contains(name),
            "{what}: {name} is in the server's build:\n{tree}"
        );
    }
    // Features only the simulator's crate turns on: the installer's test
    // knobs, and the command line's in-process entry points.
    for feature in ["\"test-knobs\"", "\"in-process\""] {
        assert!(
            !tree.contains(feature),
            "{what}: feature {feature} is on in the server's build:\n{tree}"
        );
    }
}

/// The script the server's binary carries (compiled in with
/// `include_str!`) holds no test switch: a test harness brings its own.
#[test]
fn the_script_every_server_gets_has_no_test_switch() {
    let script = "installer/bootstrap-agentsadm.sh";
    let text = std::fs::read_to_string(root().join(script)).expect(script);
    assert!(
        !text.contains("AGENTSADM_TEST_"),
        "{script} reads a test switch"
    );
}

/// Rust files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A line without its `//` comment and with string and char literals
/// emptied, for counting braces (good enough for this code base: no raw
/// strings hold braces across lines where a function starts or ends).
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_str = false,
            (true, _) => {}
            (false, '"') => in_str = true,
            (false, '\'') => {
                // A char literal ('{', '\n') or a lifetime ('a).
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') {
                    chars.next();
                    chars.next();
                    chars.next();
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, c) => out.push(c),
        }
    }
    out
}

/// (name, first line, length in lines) of each `fn` with a body in `text`.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = code_of(line);
        let Some(at) = code.find("fn ") else {
            continue;
        };
        let before = code[..at].trim();
        let modifiers_only = before.split_whitespace().all(|w| {
            matches!(w, "pub" | "const" | "async" | "unsafe" | "extern") || w.starts_with("pub(")
        });
        if !modifiers_only {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            let c = code_of(l);
            for ch in c.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if started && depth == 0 {
                out.push((name.clone(), i + 1, j - i + 1));
                break;
            }
            if !started && c.trim_end().ends_with(';') {
                break;
            }
        }
    }
    out
}

#[test]
fn no_source_file_over_1000_lines_and_no_product_function_over_120() {
    let mut files = Vec::new();
    for dir in ["crates", "src", "tests"] {
        rust_files(&root().join(dir), &mut files);
    }
    files.sort();
    let product: Vec<String> = LAYERS
        .iter()
        .map(|(name, _)| *name)
        .filter(|n| !matches!(*n, "sim" | "dev"))
        .map(|n| format!("crates/{n}/src/"))
        .collect();
    let mut long = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(root())
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let text = std::fs::read_to_string(file).expect("readable");
        let n = text.lines().count();
        if n > 1000 {
            long.push(format!("{rel}: {n} lines"));
        }
        if !product.iter().any(|p| rel.starts_with(p.as_str())) {
            continue;
        }
        // Unit tests at the end of a product file are not product code.
        let body = match text.find("#[cfg(test)]") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        for (name, line, len) in functions(body) {
            if len > 120 {
                long.push(format!("{rel}:{line}: fn {name} is {len} lines"));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}

#[test]
fn the_function_scanner_counts_bodies_and_skips_declarations() {
    let text = "pub(crate) async fn a(x: &str) -> char {\n    let b = '{';\n    \"}\";\n    b\n}\ntrait T {\n    fn decl(&self);\n}\nfn c() {}\n";
    let found = functions(text);
    assert_eq!(
        found,
        vec![("a".to_string(), 1, 5), ("c".to_string(), 9, 1)]
    );
}
