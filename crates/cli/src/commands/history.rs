//! `agentsadm history [RUN]`: the runs that changed the datacenter, as
//! `sdcadm history` listed them (id, started, took, command, servers
//! changed and failed, who), newest first; with a RUN, that run per
//! server and component. Both copies are read: this headnode's journals
//! and SAPI's (another session's runs); without SAPI, this headnode's
//! alone, with a warning.

use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::Args;
use serde_json::json;

use std::process::ExitCode;

use crate::CmdResult;
use crate::pictures::timeline::wrap;
use crate::settings::Settings;
use agentsadm_orchestrate::history::{HistoryEntry, ServerRecord};
use agentsadm_orchestrate::report::fmt_duration;
use agentsadm_types::output::{TableOptions, table, table_with};

#[derive(Args, Debug)]
pub struct HistoryArgs {
    /// Show this run (its id or the start of it) per server.
    #[arg(value_name = "RUN")]
    pub run: Option<String>,
    /// Only the newest N runs.
    #[arg(short = 'n', long = "limit", value_name = "N")]
    pub limit: Option<usize>,
    /// Only runs started since WHEN: a time (2026-05-01, 2026-05-01T10:00:00Z)
    /// or how long ago (2h, 3d).
    #[arg(long, value_name = "WHEN", value_parser = since)]
    pub since: Option<SystemTime>,
    #[command(flatten)]
    pub table: crate::args::TableArgs,
    /// With RUN: also write its timeline as an SVG picture to FILE (for a
    /// ticket or a wiki; self-contained).
    #[arg(long, value_name = "FILE", requires = "run")]
    pub svg: Option<std::path::PathBuf>,
    /// With RUN: also map its servers by rack (CNAPI rack_identifier), a
    /// cell each, to see failures that share a rack.
    #[arg(long, requires = "run")]
    pub racks: bool,
}

/// `--since`: an RFC 3339 time or date, or a duration before now.
fn since(s: &str) -> Result<SystemTime, String> {
    let s = s.trim();
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(&format!("{s}T00:00:00Z")) {
        return Ok(t);
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(SystemTime::now()
            .checked_sub(d)
            .unwrap_or(SystemTime::UNIX_EPOCH)),
        Err(_) => Err(format!(
            "{s:?} is not a time: give a date (2026-05-01), a time (2026-05-01T10:00:00Z) or how long ago (2h, 3d)"
        )),
    }
}

pub async fn run(g: &Settings, a: HistoryArgs) -> CmdResult {
    let out = g.output();
    let listing = g.history_store().list().await;
    if let Some(e) = &listing.sapi_error {
        out.warn(format!("{e}; showing this headnode's runs only"));
    }
    if let Some(run) = &a.run {
        let entry = agentsadm_orchestrate::history::find_in(listing.entries, run)?;
        if let Some(file) = &a.svg {
            let picture = crate::pictures::timeline::svg(&entry).ok_or_else(|| {
                anyhow::anyhow!(
                    "run {run} has no timeline to draw: no server's start was recorded (no server step, or recorded by an older agentsadm)"
                )
            })?;
            tokio::fs::write(file, picture)
                .await
                .with_context(|| format!("cannot write the picture to {}", file.display()))?;
        }
        if out.json {
            out.json(&json!({ "run": entry }));
        } else {
            out.line(render_run(&entry).trim_end());
            if a.racks {
                match crate::pictures::racks::run_map(&entry) {
                    Some(map) => out.line(format!("\n{}", map.trim_end())),
                    None => out.line("\nNo server ran in this run: no rack map."),
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut entries: Vec<HistoryEntry> = listing
        .entries
        .into_iter()
        .filter(|e| match (a.since, e.started_at()) {
            (Some(since), Some(started)) => started >= since,
            (Some(_), None) => false,
            (None, _) => true,
        })
        .collect();
    entries.reverse();
    if let Some(n) = a.limit {
        entries.truncate(n);
    }
    if out.json {
        out.json(&json!({ "runs": entries }));
    } else if entries.is_empty() {
        out.line("No runs recorded.");
    } else {
        let text = render_list(&entries, &a.table.options(&[])).map_err(anyhow::Error::msg)?;
        out.line(text.trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// The list, one run a line, newest first (unless `--sort` says), with
/// `-H` and `-o` as `list` takes them.
pub fn render_list(entries: &[HistoryEntry], options: &TableOptions) -> Result<String, String> {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let (changed, failed) = e.counts();
            vec![
                e.short_id(),
                short_time(&e.started),
                e.took().map(fmt_duration).unwrap_or_else(|| "-".into()),
                e.status.as_str().to_string(),
                changed.to_string(),
                failed.to_string(),
                format!("{}@{}", e.user, e.host),
                if e.command.is_empty() {
                    e.operation.clone()
                } else {
                    e.command.clone()
                },
            ]
        })
        .collect();
    table_with(
        &[
            "RUN", "STARTED", "TOOK", "STATUS", "CHANGED", "FAILED", "WHO", "COMMAND",
        ],
        &rows,
        options,
    )
}

/// `2026-05-01T10:22:03Z` from an RFC 3339 time with fractions.
fn short_time(t: &str) -> String {
    match humantime::parse_rfc3339_weak(t) {
        Ok(t) => humantime::format_rfc3339_seconds(t).to_string(),
        Err(_) => t.to_string(),
    }
}

fn short_image(i: Option<agentsadm_types::ids::ImageUuid>, version: Option<&str>) -> String {
    match (i, version) {
        (Some(i), Some(v)) if !v.is_empty() => format!("{v} ({})", &i.to_string()[..8]),
        (Some(i), _) => i.to_string()[..8].to_string(),
        (None, Some(v)) if !v.is_empty() => v.to_string(),
        (None, _) => "-".to_string(),
    }
}

/// One run: its head, then a line per server and component.
pub fn render_run(e: &HistoryEntry) -> String {
    let mut out = String::new();
    let id = e.id.map(|i| i.to_string()).unwrap_or_default();
    out.push_str(&format!("Run {id}: {}\n", e.operation));
    if !e.command.is_empty() {
        out.push_str(&format!("  command:  {}\n", e.command));
    }
    out.push_str(&format!("  who:      {} ({})\n", e.owner, e.host));
    out.push_str(&format!("  started:  {}\n", short_time(&e.started)));
    if let Some(end) = &e.ended {
        out.push_str(&format!("  ended:    {}\n", short_time(end)));
    }
    let took = e.took().map(fmt_duration).unwrap_or_else(|| "-".into());
    let expected = e
        .plan
        .expected_finish_s
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(|d| format!(" (the plan expected {})", fmt_duration(d)))
        .unwrap_or_default();
    out.push_str(&format!("  took:     {took}{expected}\n"));
    let exit = e
        .exit_status
        .map(|s| format!(", exit status {s}"))
        .unwrap_or_default();
    out.push_str(&format!("  status:   {}{exit}\n", e.status.as_str()));
    if let Some(r) = e.reverts {
        out.push_str(&format!("  reverts:  run {r}\n"));
    }
    if let Some(r) = e.continues {
        out.push_str(&format!(
            "  carries on: run {r} (its canary was declined)\n"
        ));
    }
    if let Some(r) = e.continued_by {
        out.push_str(&format!(
            "  carried on by: run {r} (after this run's declined canary)\n"
        ));
    }
    for (what, v) in [("halted", &e.halted), ("error", &e.error)] {
        if let Some(v) = v {
            let head = format!("  {what}:{:w$}", "", w = 10 - what.len() - 1);
            out.push_str(&wrap(&head, v, 12, RUN_WIDTH, 4));
        }
    }
    for c in &e.plan.service_changes {
        out.push_str(&format!(
            "  service:  {} default image {} -> {}{}\n",
            c.component,
            short_image(c.from, c.from_version.as_deref().map(release)),
            short_image(c.to, Some(release(&c.to_version))),
            if c.put_back {
                " (put back by the halt)"
            } else {
                ""
            }
        ));
    }
    for r in &e.plan.records {
        out.push_str(&format!("  record:   {r}\n"));
    }
    if e.records_made + e.records_failed > 0 {
        out.push_str(&format!(
            "  records:  {} made, {} failed or not made\n",
            e.records_made, e.records_failed
        ));
    }
    let (changed, failed) = e.counts();
    let left = match e.interrupted() {
        0 => String::new(),
        n => format!(", {n} interrupted (may have finished since)"),
    };
    out.push_str(&format!(
        "  servers:  {} planned, {} recorded, {changed} changed, {failed} failed{left}\n",
        e.plan.servers,
        e.servers.len()
    ));
    if let Some(picture) = crate::pictures::timeline::timeline(e) {
        out.push('\n');
        out.push_str(&picture);
    }
    if !e.servers.is_empty() {
        out.push('\n');
        out.push_str(&server_table(&e.servers));
        out.push_str(&failures(e));
    }
    out
}

/// `history RUN` fits this many columns: long texts are wrapped and
/// shortened (whole in `--json` and the run log).
pub const RUN_WIDTH: usize = 100;

/// Why servers failed, each wrapped under its hostname, with its tasks.
fn failures(e: &HistoryEntry) -> String {
    let mut failed: Vec<&ServerRecord> = e.servers.iter().filter(|s| s.failure.is_some()).collect();
    if failed.is_empty() {
        return String::new();
    }
    failed.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    let id =
        e.id.map(|i| i.to_string()[..8].to_string())
            .unwrap_or_default();
    let mut out = format!("\nWhy (the whole text: agentsadm history {id} --json):\n");
    for s in failed {
        let why = s.failure.as_deref().unwrap_or_default();
        out.push_str(&wrap(&format!("  {}: ", s.hostname), why, 4, RUN_WIDTH, 3));
        if !s.tasks.is_empty() {
            let tasks: Vec<String> = s.tasks.iter().map(|t| t.to_string()).collect();
            out.push_str(&wrap(
                "    CNAPI tasks: ",
                &tasks.join(" "),
                6,
                RUN_WIDTH,
                3,
            ));
        }
    }
    out
}

/// A version as the server table shows it: its release alone
/// (`1.1.0-master-20260201T000000Z-g45ba50e` is `1.1.0`; the image's short
/// UUID beside it tells builds apart).
fn release(version: &str) -> &str {
    version.split('-').next().unwrap_or(version)
}

fn server_table(servers: &[ServerRecord]) -> String {
    let mut sorted: Vec<&ServerRecord> = servers.iter().collect();
    sorted.sort_by(|a, b| a.hostname.cmp(&b.hostname).then(a.server.cmp(&b.server)));
    let mut rows = Vec::new();
    for s in sorted {
        let took = Duration::try_from_secs_f64(s.elapsed_s).unwrap_or_default();
        if s.steps.is_empty() {
            rows.push(vec![
                s.hostname.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                s.outcome.clone(),
                fmt_duration(took),
                "-".into(),
            ]);
        }
        for st in &s.steps {
            // The gate's kind is in --json; here whether it passed.
            let gate = match st.gate_passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "-",
            };
            // "succeeded (done)" said one thing twice: the step's status
            // only where it adds to the server's.
            let outcome = if st.status == "done" || st.status == s.outcome {
                s.outcome.clone()
            } else {
                format!("{} ({})", s.outcome, st.status)
            };
            let short = |i, v: Option<&str>| short_image(i, v.map(release));
            rows.push(vec![
                s.hostname.clone(),
                st.component.clone(),
                short(st.from, st.from_version.as_deref()),
                short(st.to, st.to_version.as_deref()),
                outcome,
                fmt_duration(st.elapsed()),
                gate.to_string(),
            ]);
        }
    }
    table(
        &[
            "SERVER",
            "COMPONENT",
            "FROM",
            "TO",
            "OUTCOME",
            "TOOK",
            "GATE",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 520-column error (a real one from a CNAPI task) once made the
    /// table that wide: now the table is bounded and the error wrapped
    /// under it, shortened to three lines.
    #[test]
    fn a_run_with_a_long_error_fits_100_columns() {
        let failure = format!(
            "vm-agent: agent_install task failed: {}",
            "x".repeat(20) + &" word".repeat(100)
        );
        let e = HistoryEntry {
            id: Some(agentsadm_types::ids::RunId::from_u128(1)),
            operation: "update vm-agent".into(),
            halted: Some("halted: ".to_string() + &"because ".repeat(40)),
            servers: vec![ServerRecord {
                hostname: "cn0001".into(),
                outcome: "failed".into(),
                failure: Some(failure),
                ..ServerRecord::default()
            }],
            ..HistoryEntry::default()
        };
        let text = render_run(&e);
        assert!(
            text.lines().all(|l| l.chars().count() <= RUN_WIDTH),
            "{text}"
        );
        let why = text.lines().skip_while(|l| !l.starts_with("Why")).count();
        assert_eq!(why, 4, "the heading and three lines: {text}");
        assert!(text.contains(" ...\n"), "{text}");
    }

    /// `history RUN` and `history RUN --racks` of a run with a canary, a
    /// wave, an outlier, a failure and an interrupted server, whole.
    #[test]
    fn a_run_as_history_shows_it() {
        use agentsadm_orchestrate::history::StepRecord;
        use agentsadm_types::ids::{ImageUuid, RunId, ServerUuid};
        let step = |status: &str, took: f64| StepRecord {
            component: "vm-agent".into(),
            action: "upgrade".into(),
            from: Some(ImageUuid::from_u128(0xd213bcc9 << 96)),
            from_version: Some("1.0.0-master-20260101T000000Z-gd213bcc".into()),
            to: Some(ImageUuid::from_u128(0x45ba50e1 << 96)),
            to_version: Some("1.1.0-master-20260201T000000Z-g45ba50e".into()),
            status: status.into(),
            elapsed_s: took,
            gate: (status != "not-run").then(|| "gz-health".into()),
            gate_passed: (status != "not-run").then_some(status == "done"),
            gate_s: None,
        };
        let server = |n: u128, start: f64, took: f64, outcome: &str, status: &str| ServerRecord {
            server: Some(ServerUuid::from_u128(n)),
            hostname: format!("cn{n:04}"),
            outcome: outcome.into(),
            elapsed_s: took,
            started_s: Some(start),
            rack: Some(if n < 5 { "rack-01" } else { "rack-02" }.into()),
            steps: vec![step(status, took)],
            ..ServerRecord::default()
        };
        let mut servers = vec![server(1, 0.0, 10.0, "succeeded", "done")];
        servers[0].canary = true;
        for n in 2..=4 {
            servers.push(server(n, 10.0, 10.0 + n as f64, "succeeded", "done"));
        }
        servers.push(server(5, 10.0, 41.0, "succeeded", "done"));
        servers[4].outlier = true;
        servers.push(server(6, 10.0, 2.0, "failed", "failed"));
        servers[5].failure =
            Some("vm-agent: agent_install task 7f1c: AgentInstall error: disk full".into());
        servers.push(server(7, 30.0, 21.0, "interrupted", "not-run"));
        let e = HistoryEntry {
            id: Some(RunId::from_u128(0x1f0c2a9e << 96)),
            operation: "update vm-agent".into(),
            command: "agentsadm update vm-agent --latest -y".into(),
            user: "root".into(),
            host: "headnode".into(),
            owner: "root@headnode:4242".into(),
            started: "2026-11-27T02:00:00.000Z".into(),
            ended: Some("2026-11-27T02:00:51.000Z".into()),
            status: agentsadm_orchestrate::history::RunStatus::Interrupted,
            plan: agentsadm_orchestrate::history::entry::PlanRecord {
                components: vec!["vm-agent".into()],
                servers: 9,
                steps: 9,
                expected_finish_s: Some(35.0),
                ..Default::default()
            },
            servers,
            elapsed_s: Some(51.0),
            exit_status: Some(2),
            halted: Some("interrupted (Ctrl-C): no further servers were started".into()),
            ..HistoryEntry::default()
        };
        let text = render_run(&e) + "\n" + &crate::pictures::racks::run_map(&e).unwrap();
        assert!(
            text.lines().all(|l| l.chars().count() <= RUN_WIDTH),
            "{text}"
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn since_takes_dates_times_and_ages() {
        let d = since("2026-05-01").unwrap();
        assert_eq!(
            humantime::format_rfc3339_seconds(d).to_string(),
            "2026-05-01T00:00:00Z"
        );
        assert!(since("2026-05-01T10:00:00Z").is_ok());
        let ago = since("2h").unwrap();
        let age = SystemTime::now().duration_since(ago).unwrap();
        assert!(age >= Duration::from_secs(7200) && age < Duration::from_secs(7300));
        assert!(since("last tuesday").unwrap_err().contains("how long ago"));
    }
}
