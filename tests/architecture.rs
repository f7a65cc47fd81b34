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

/// The command line's own shape (one module per command, settings
/// resolved once, nothing blocking in a command).
#[path = "architecture/cli.rs"]
mod cli;
#[path = "architecture/tests_shape.rs"]
mod tests_shape;

/// Every crate of the workspace with the crates it may depend on (directly).
/// Product layers first, bottom up; then the two beside the product.
const LAYERS: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("api", &["types"]),
    ("platform", &["types"]),
    // The planner reads wire types from agentsadm-types, not the clients:
    // its tests build without the HTTP stack (tests_shape).
    ("plan", &["types"]),
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

/// The source of one file with comments and the insides of string and char
/// literals blanked, so that only code is scanned for paths.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && !b[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('{', '\n', '\u{7f}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Tokens of code: identifiers and single punctuation, with `::` as one.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// The module path a file under a crate's `src/` defines (`a/b.rs` and
/// `a/b/mod.rs` are `[a, b]`; `lib.rs` is `[]`).
fn module_path_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Every path a file's product code names from inside its own crate
/// (`crate::…`, `super::…`, `self::…`), resolved to an absolute module path
/// (the segments after `crate`). `#[cfg(test)]` modules are skipped: a
/// test may reach anywhere.
fn crate_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let toks = tokens(&code_only(text));
    let mut out = Vec::new();
    // The inline modules open around the cursor: (name, brace depth at
    // which it closes, whether it is test code).
    let mut open: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut cfg_test = false;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].as_str();
        match t {
            "#" if toks.get(i + 1).map(String::as_str) == Some("[") => {
                let attr: String = toks[i..].iter().take(6).cloned().collect();
                if attr.starts_with("#[cfg(test)") {
                    cfg_test = true;
                }
                i += 1;
                continue;
            }
            "mod" if toks.get(i + 2).map(String::as_str) == Some("{") => {
                let test = cfg_test || open.last().is_some_and(|m| m.2);
                open.push((toks[i + 1].clone(), depth + 1, test));
                depth += 1;
                cfg_test = false;
                i += 3;
                continue;
            }
            "{" => depth += 1,
            "}" => {
                if open.last().is_some_and(|m| m.1 == depth) {
                    open.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ";" => cfg_test = false,
            // A `#[cfg(test)]` item other than a module or a `use` counts
            // as product code (the scanner then sees more, never less).
            "fn" | "struct" | "enum" | "impl" | "const" | "static" | "trait" | "type" => {
                cfg_test = false
            }
            _ => {}
        }
        let in_test = open.last().is_some_and(|m| m.2) || cfg_test;
        let starts_path = matches!(t, "crate" | "super" | "self")
            && toks.get(i + 1).map(String::as_str) == Some("::")
            && !(i > 0 && toks[i - 1] == "::");
        if !starts_path {
            i += 1;
            continue;
        }
        let mut here: Vec<String> = module.to_vec();
        here.extend(open.iter().map(|m| m.0.clone()));
        let (prefix, next) = resolve_path(&toks, i, &here);
        if !in_test {
            out.extend(prefix);
        }
        i = next;
    }
    out
}

/// Reads the path starting at `toks[at]` (with `use` groups), resolved
/// against `here`; returns the absolute paths it names and where it ends.
fn resolve_path(toks: &[String], at: usize, here: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path: Vec<String> = Vec::new();
    let mut i = at;
    let mut first = true;
    while let Some(t) = toks.get(i) {
        match t.as_str() {
            "crate" if first => path.clear(),
            "super" if first || path.len() <= here.len() => {
                if first {
                    path = here.to_vec();
                }
                path.pop();
            }
            "self" if first => path = here.to_vec(),
            "{" => return use_group(toks, i, &path),
            w if w.chars().all(|c| c.is_alphanumeric() || c == '_') => path.push(w.to_string()),
            _ => break,
        }
        first = false;
        if toks.get(i + 1).map(String::as_str) == Some("::") {
            i += 2;
        } else {
            i += 1;
            break;
        }
    }
    (vec![path], i)
}

/// The `use` group opening at `toks[at]` (`{`): each element a path
/// under `prefix`; and where the group ends.
fn use_group(toks: &[String], at: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut out = Vec::new();
    let mut j = at + 1;
    while j < toks.len() && toks[j] != "}" {
        if toks[j] == "," {
            j += 1;
            continue;
        }
        let (inner, end) = group_element(toks, j, prefix);
        out.extend(inner);
        j = end;
    }
    (out, j + 1)
}

/// One element of a `use` group under `prefix`: `self`, `a::b`, `a::{…}`,
/// `a as b` or `*`.
fn group_element(toks: &[String], at: usize, prefix: &[String]) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix.to_vec();
    let mut j = at;
    while j < toks.len() {
        match toks[j].as_str() {
            "self" => {}
            "{" => return use_group(toks, j, &path),
            "," | "}" => break,
            "as" => {
                j += 2;
                break;
            }
            "::" | "*" => {}
            w => path.push(w.to_string()),
        }
        j += 1;
    }
    (vec![path], j)
}

/// The arrows between the top-level modules of the crate at `src`:
/// module -> the modules its product code names.
fn module_graph(src: &Path, depth: usize) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let module = module_path_of(rel);
        if module.len() < depth {
            continue;
        }
        let from = module[..depth].join("::");
        let text = std::fs::read_to_string(&file).expect("readable");
        let entry = graph.entry(from.clone()).or_default();
        for path in crate_paths(&text, &module) {
            if path.len() > depth {
                let to = path[..depth].join("::");
                if to != from {
                    entry.insert(to);
                }
            }
        }
    }
    // Only arrows to modules that exist (not to items re-exported at the root).
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for targets in graph.values_mut() {
        targets.retain(|t| names.contains(t));
    }
    graph
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The orchestrator's layers (directories of `crates/orchestrate/src`),
/// bottom up. A module imports from the layers below its own and from
/// modules of its own layer, never from a layer above; and no modules
/// import each other round in a circle.
const ORCHESTRATE_LAYERS: &[&str] = &["vocabulary", "carriers", "executor", "runner", "commands"];

/// The orchestrator's module graph (`layer::module` -> the modules it
/// names), and the crate-internal paths that name a module through its
/// re-export at the crate's root instead of through its layer (which would
/// hide an arrow from the graph).
fn orchestrate_graph() -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let src = root().join("crates/orchestrate/src");
    let graph = module_graph(&src, 2);
    let reexported: BTreeSet<&str> = graph.keys().filter_map(|k| k.split("::").nth(1)).collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut hidden = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let text = std::fs::read_to_string(&file).expect("readable");
        for path in crate_paths(&text, &module_path_of(rel)) {
            if path.len() > 1 && reexported.contains(path[0].as_str()) {
                hidden.push(format!("{}: crate::{}", rel.display(), path.join("::")));
            }
        }
    }
    (graph, hidden)
}

/// The arrows of `graph` that point up the layers (`from`, `to`).
fn back_arrows(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let rank = |m: &str| {
        let layer = m.split("::").next().unwrap_or_default();
        ORCHESTRATE_LAYERS.iter().position(|l| *l == layer)
    };
    let mut out = Vec::new();
    for (from, targets) in graph {
        for to in targets {
            if rank(to) > rank(from) {
                out.push((from.clone(), to.clone()));
            }
        }
    }
    out
}

/// Issue 31: the orchestrator was one knot (18 of its 27 modules in one
/// cycle; 9 arrows up the layers it now has, 85 arrows in all). Run with
/// `--nocapture` to see the graph.
#[test]
fn the_orchestrators_layers_point_down_and_its_modules_form_no_cycle() {
    let src = root().join("crates/orchestrate/src");
    let mut outside = Vec::new();
    for entry in std::fs::read_dir(&src).expect("readable") {
        let name = entry.expect("dir entry").file_name();
        let name = name.to_string_lossy();
        if name != "lib.rs" && !ORCHESTRATE_LAYERS.contains(&name.as_ref()) {
            outside.push(name.into_owned());
        }
    }
    assert!(
        outside.is_empty(),
        "modules outside the layers (put each in one of {ORCHESTRATE_LAYERS:?}): {outside:?}"
    );
    let (graph, hidden) = orchestrate_graph();
    for (from, to) in &graph {
        println!(
            "{from} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let up = back_arrows(&graph);
    let knots = cycles(&graph);
    println!(
        "{} modules, {} arrows, {} up the layers, {} cycles",
        graph.len(),
        graph.values().map(BTreeSet::len).sum::<usize>(),
        up.len(),
        knots.len()
    );
    assert!(
        hidden.is_empty(),
        "name the layer in crate-internal paths (crate::<layer>::<module>), not the root's re-export:\n{}",
        hidden.join("\n")
    );
    assert!(up.is_empty(), "imports up the layers: {up:?}");
    assert!(
        knots.is_empty(),
        "modules importing each other round: {knots:?}"
    );
}

/// The scanner resolves `crate::`, `super::` and `use` groups, and skips
/// comments, strings and `#[cfg(test)]` modules.
#[test]
fn the_path_scanner_resolves_groups_and_super_and_skips_tests() {
    let text = "//! [`crate::x::Doc`]\nuse super::a::{self, B};\nuse crate::{b::C, c::{d::E, F}};\nfn f() { let s = \"crate::nope::X\"; crate::d::g(); }\nmod inner {\n    use super::local;\n}\n#[cfg(test)]\nmod tests {\n    use crate::t::X;\n}\n";
    let module = vec!["layer".to_string(), "m".to_string()];
    let found: BTreeSet<String> = crate_paths(text, &module)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "layer::a",
        "layer::a::B",
        "b::C",
        "c::d::E",
        "c::F",
        "d::g",
        "layer::m::local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(found, want);
}

/// Issue 31: one door to execution. In the product, only the run
/// (`runner/run.rs`: the lock, the plan made again under it, the question
/// or `-y`, history) builds an executor; `Session::execute`, `adopt::adopt`,
/// `cleanup::execute` and `check::fix` each built their own, so a command
/// or a test could execute a plan with no lock and no history. (Tests of
/// the executor itself build one inside its crate.)
#[test]
fn only_the_run_builds_an_executor() {
    let mut doors: Vec<String> = product_code(&[])
        .into_iter()
        .filter(|(rel, code)| {
            code.contains("Executor::new(") && rel != "crates/orchestrate/src/runner/run.rs"
        })
        .map(|(rel, _)| rel)
        .collect();
    // The benchmarks and the simulator too: a benchmark times the run the
    // binary goes through.
    let mut tools = Vec::new();
    for krate in ["dev", "sim"] {
        rust_files(&root().join("crates").join(krate).join("src"), &mut tools);
    }
    tools.sort();
    for file in tools {
        let code = code_only(&std::fs::read_to_string(&file).expect("readable"));
        if code.contains("Executor::new(") {
            doors.push(
                file.strip_prefix(root())
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
            );
        }
    }
    assert!(
        doors.is_empty(),
        "an executor built outside the run (no lock, no history): {doors:?}"
    );
}

/// Each product source file (the crates but the simulator's and dev's,
/// and `also_skip`) as its path from the root and its code: before its
/// `#[cfg(test)]` part, comments and the insides of literals blanked.
fn product_code(also_skip: &[&str]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root())
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let product = LAYERS
            .iter()
            .map(|(name, _)| *name)
            .filter(|n| !matches!(*n, "sim" | "dev") && !also_skip.contains(n))
            .any(|n| rel.starts_with(&format!("crates/{n}/src/")));
        if !product {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        let body = match text.find("#[cfg(test)]") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        out.push((rel, code_only(body)));
    }
    out
}

/// The platform a run drives is chosen in one place (issue 31): only the
/// choice (`gz/src/session/platform.rs`: SmartOS in the server's build
/// whatever `--root` says) names the rooted fake, and only the session
/// builds it from that choice (`session/mod.rs`) or takes its defaults
/// for it (`health.rs`). `list`'s read of the headnode's own disk chose
/// the fake for any root but `/` (flows/src/ondisk.rs) before it asked
/// the choice; the simulator and the dev crate choose their own.
#[test]
fn the_platform_is_chosen_in_one_place() {
    const CHOICE: &[&str] = &[
        "crates/gz/src/session/platform.rs",
        "crates/gz/src/session/mod.rs",
        "crates/gz/src/health.rs",
    ];
    // The platform crate defines the fake; it chooses nothing.
    let elsewhere: Vec<String> = product_code(&["platform"])
        .into_iter()
        .filter(|(rel, code)| {
            !CHOICE.contains(&rel.as_str())
                && [
                    "PlatformKind::Rooted",
                    "Rooted::new(",
                    "Rooted::with_faults(",
                ]
                .iter()
                .any(|name| code.contains(name))
        })
        .map(|(rel, _)| rel)
        .collect();
    assert!(
        elsewhere.is_empty(),
        "the rooted (fake SMF) platform chosen outside the platform choice: {elsewhere:?}"
    );
}
