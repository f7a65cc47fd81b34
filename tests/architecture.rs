//! The crate's dependency arrows, checked from the source: the CLI uses the
//! orchestrator and the flows, which use the API clients and the installer,
//! which use the platform and the shared domain types; the simulator and
//! its tools (behind the `sim` feature) use the product and are never used
//! by it, not even by a product module's unit tests.
//!
//! A reference is a `crate::<module>` path anywhere in a file (imports,
//! paths in expressions, doc links included), which is what a cycle or a
//! sim-side dependency looks like in this code base.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Modules (paths under `src/`, without `.rs`) that sit beside the product.
const SIM_SIDE: &[&str] = &[
    "sim",
    "imagebuild",
    "bench",
    "demo",
    "cli/demo",
    "cli/sim",
    "cli/bench",
    "orchestrate/testkit",
    "orchestrate/fake",
];

/// Top-level modules each product tier may not refer to.
fn forbidden_for(top: &str) -> &'static [&'static str] {
    const ABOVE_API: &[&str] = &["cli", "orchestrate", "flows", "gz"];
    const ABOVE_GZ: &[&str] = &["cli", "orchestrate", "flows"];
    match top {
        "cli" => &[],
        "orchestrate" | "flows" => &["cli"],
        "gz" => ABOVE_GZ,
        "api" | "remote" => ABOVE_API,
        // platform and the shared types: nothing above them.
        _ => &["cli", "orchestrate", "flows", "gz", "api", "remote"],
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `gz/session/install.rs` -> `gz/session/install`; `gz/mod.rs` -> `gz`.
fn module_of(rel: &Path) -> String {
    let s = rel.with_extension("").to_string_lossy().replace('\\', "/");
    s.strip_suffix("/mod").unwrap_or(&s).to_string()
}

fn is_sim_side(module: &str) -> bool {
    SIM_SIDE
        .iter()
        .any(|s| module == *s || module.starts_with(&format!("{s}/")))
}

/// The top-level modules and the sim-side modules a file's text refers to
/// through `crate::` paths.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        // `agentsadm::crate::` never occurs; skip identifiers ending in
        // `crate` (e.g. `my_crate::`).
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
        if let Some(top) = parts.first() {
            out.insert(top.to_string());
            if let Some(second) = parts.get(1) {
                out.insert(format!("{top}/{second}"));
            }
        }
    }
    out
}

#[test]
fn product_modules_point_one_way_and_never_at_the_simulator() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let module = module_of(rel);
        if is_sim_side(&module) || module == "lib" || module == "main" {
            continue;
        }
        let top = module.split('/').next().unwrap_or_default().to_string();
        let text = std::fs::read_to_string(file).expect("readable");
        // A test module gated on the sim feature (the file's last item by
        // convention) is sim-side code: the server's build never has it.
        let text = match text.find("#[cfg(all(test, feature = \"sim\"))]") {
            Some(i) => text[..i].to_string(),
            None => text,
        };
        for r in references(&text) {
            let r_top = r.split('/').next().unwrap_or_default();
            if is_sim_side(&r) {
                violations.push(format!(
                    "{}: refers to sim-side crate::{}",
                    rel.display(),
                    r.replace('/', "::")
                ));
            } else if !r.contains('/') && r_top != top && forbidden_for(&top).contains(&r_top) {
                violations.push(format!(
                    "{}: {top} must not refer to crate::{r_top}",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependency arrows broken:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_reference_scanner_sees_paths_and_skips_lookalikes() {
    let refs = references(
        "use crate::gz::txn;\nlet x = crate::sim::Sim::new();\n/// see [`crate::cli`]\nmy_crate::nope",
    );
    let want: BTreeSet<String> = ["gz", "gz/txn", "sim", "sim/Sim", "cli"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, want);
}
