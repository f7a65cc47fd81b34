//! The findings as operators read them.

use std::fmt::Write as _;

use super::counts;
use super::finding::Finding;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::output::plural;

/// The findings as operators read them: grouped by server, one line per
/// finding and one for its fix, then a summary line.
pub fn render(findings: &[Finding], servers_checked: usize) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        let _ = writeln!(
            out,
            "No drift found ({} checked).",
            plural(servers_checked, "server", "servers")
        );
        return out;
    }
    let mut current: Option<Option<ServerUuid>> = None;
    for f in findings {
        if current != Some(f.server) {
            current = Some(f.server);
            if !out.is_empty() {
                out.push('\n');
            }
            match (f.server, &f.hostname) {
                (None, _) => out.push_str("Datacenter:\n"),
                (Some(s), Some(h)) => {
                    let _ = writeln!(out, "{h} ({s}):");
                }
                (Some(s), None) => {
                    let _ = writeln!(out, "server {s} (not in CNAPI):");
                }
            }
        }
        let mark = if f.informational { "i" } else { "!" };
        let component = f
            .component
            .as_deref()
            .map(|c| format!(" {c}:"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {mark} {}{component} {}", f.kind, f.details);
        let _ = writeln!(out, "      fix: {}", f.fix.describe());
    }
    let drift = findings.iter().filter(|f| !f.informational).count();
    let info = findings.len() - drift;
    let fixable = findings.iter().filter(|f| f.fix.is_automatic()).count();
    let by_kind: Vec<String> = counts(findings)
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(
        out,
        "\n{} ({} informational) on {} checked: {}; {fixable} fixable with --fix.",
        plural(drift + info, "finding", "findings"),
        info,
        plural(servers_checked, "server", "servers"),
        by_kind.join(", ")
    );
    out
}
