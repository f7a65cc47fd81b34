//! Rack-by-server maps: one line per rack (CNAPI `rack_identifier`), one
//! cell per server in hostname order, so that failures that share a rack
//! (a switch, a PDU) or a rack left behind can be seen at a glance.
//! `history RUN --racks` draws a run; `list --racks` the fleet.

use std::collections::BTreeMap;

use agentsadm_orchestrate::history::HistoryEntry;

/// Cells on one line of a rack; more wrap under it.
const PER_LINE: usize = 40;
/// A space after every this many cells, for counting by eye.
const GROUP: usize = 10;
/// The rack label's column.
const LABEL: usize = 12;
/// Servers CNAPI has no rack for.
const NO_RACK: &str = "(no rack)";

/// One server's cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub hostname: String,
    pub glyph: char,
}

/// The map: `title`, then a line per rack (racks by name, servers without
/// one last), each with its cells and a count of every glyph but `plain`,
/// then `legend`. At most 80 columns.
pub fn render(
    title: &str,
    racks: BTreeMap<Option<String>, Vec<Cell>>,
    plain: char,
    legend: &[(char, &str)],
) -> String {
    let mut out = format!("{title}\n");
    let mut order: Vec<(Option<String>, Vec<Cell>)> = racks.into_iter().collect();
    // BTreeMap puts None first; servers without a rack read best last.
    order.sort_by_key(|(rack, _)| rack.is_none());
    for (rack, mut cells) in order {
        cells.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        let label = rack.as_deref().unwrap_or(NO_RACK);
        let label: String = label.chars().take(LABEL).collect();
        let mut counts: BTreeMap<char, usize> = BTreeMap::new();
        for c in &cells {
            *counts.entry(c.glyph).or_default() += 1;
        }
        let notable: Vec<String> = legend
            .iter()
            .filter(|(g, _)| *g != plain)
            .filter_map(|(g, _)| counts.get(g).map(|n| format!("{n}{g}")))
            .collect();
        let total = format!(
            "{}{}",
            cells.len(),
            if notable.is_empty() {
                String::new()
            } else {
                format!(" ({})", notable.join(" "))
            }
        );
        for (i, chunk) in cells.chunks(PER_LINE).enumerate() {
            let mut line = String::new();
            for (j, c) in chunk.iter().enumerate() {
                if j > 0 && j % GROUP == 0 {
                    line.push(' ');
                }
                line.push(c.glyph);
            }
            let head = if i == 0 { label.as_str() } else { "" };
            let tail = if i == 0 { total.as_str() } else { "" };
            out.push_str(
                format!("  {head:<LABEL$} {line:<w$}  {tail}", w = PER_LINE + 3).trim_end(),
            );
            out.push('\n');
        }
    }
    let key: Vec<String> = legend
        .iter()
        .map(|(g, what)| format!("{g} {what}"))
        .collect();
    for line in crate::terminal::fold(&key.join(", "), 78).lines() {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// A run's servers by rack: what happened to each.
pub fn run_map(e: &HistoryEntry) -> Option<String> {
    if e.servers.is_empty() {
        return None;
    }
    let mut racks: BTreeMap<Option<String>, Vec<Cell>> = BTreeMap::new();
    for s in &e.servers {
        let changed = s.steps.iter().any(|st| st.changed());
        let glyph = match s.outcome.as_str() {
            "failed" | "timed-out" => 'x',
            "interrupted" => '?',
            _ if s.canary && changed => 'C',
            _ if s.outlier && changed => '!',
            _ if changed => '=',
            _ => '.',
        };
        racks.entry(s.rack.clone()).or_default().push(Cell {
            hostname: s.hostname.clone(),
            glyph,
        });
    }
    Some(render(
        "By rack (a cell per server, by hostname):",
        racks,
        '=',
        &[
            ('=', "changed"),
            ('C', "canary"),
            ('!', "slow (outlier)"),
            ('x', "failed"),
            ('?', "interrupted"),
            ('.', "not changed"),
        ],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_orchestrate::history::{ServerRecord, StepRecord};

    fn server(host: &str, rack: Option<&str>, outcome: &str, step: &str) -> ServerRecord {
        ServerRecord {
            hostname: host.into(),
            rack: rack.map(str::to_string),
            outcome: outcome.into(),
            steps: vec![StepRecord {
                component: "vm-agent".into(),
                status: step.into(),
                ..StepRecord::default()
            }],
            ..ServerRecord::default()
        }
    }

    #[test]
    fn a_run_by_rack_shows_failures_sharing_a_rack() {
        let mut servers = Vec::new();
        for i in 1..=45 {
            let failed = (20..=22).contains(&i);
            servers.push(server(
                &format!("cn{i:04}"),
                Some("rack-01"),
                if failed { "failed" } else { "succeeded" },
                if failed { "failed" } else { "done" },
            ));
        }
        servers[0].canary = true;
        servers.push(server("cn0100", Some("rack-02"), "interrupted", "not-run"));
        servers.push(server("cn0101", Some("rack-02"), "succeeded", "done"));
        servers.push(server("headnode", None, "succeeded", "not-run"));
        let e = HistoryEntry {
            servers,
            ..HistoryEntry::default()
        };
        let map = run_map(&e).unwrap();
        assert_eq!(
            map,
            "By rack (a cell per server, by hostname):\n  \
             rack-01      C========= =========x xx======== ==========  45 (1C 3x)\n  \
             \x20            =====\n  \
             rack-02      ?=                                           2 (1?)\n  \
             (no rack)    .                                            1 (1.)\n  \
             = changed, C canary, ! slow (outlier), x failed, ? interrupted, . not changed\n"
        );
        assert!(map.lines().all(|l| l.chars().count() <= 80), "{map}");
    }

    #[test]
    fn no_servers_no_map() {
        assert_eq!(run_map(&HistoryEntry::default()), None);
    }
}
