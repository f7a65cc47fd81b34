//! The end of a run as operators read it: the per-component table (done /
//! failed / skipped, p50 / p90 / max install time), failures, outliers,
//! servers left running, the safety settings as they ended (canary,
//! budget), why the run halted and what was put back, record changes that
//! were not made, and a one-line verdict.

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::vocabulary::outcomes::RecordStatus;
use crate::vocabulary::outlier::percentile_sorted;
use crate::vocabulary::report::ComponentSummary;
use crate::vocabulary::report::ExecReport;
use crate::vocabulary::report::Halted;
use crate::vocabulary::report::ServerOutcome;
use crate::vocabulary::report::ServerStatus;
use crate::vocabulary::report::StepStatus;
use crate::vocabulary::report::fmt_duration;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_types::ids::ServerUuid;

impl ExecReport {
    /// The per-component summary table's rows, in the plan's component order.
    pub fn summary(&self, plan: &Plan) -> Vec<ComponentSummary> {
        let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        let mut rows: BTreeMap<&str, ComponentSummary> = BTreeMap::new();
        let mut order: Vec<&str> = plan
            .components()
            .iter()
            .map(ComponentName::as_str)
            .collect();
        for s in plan.skips() {
            if let Some(c) = s.component.as_deref()
                && !order.contains(&c)
            {
                order.push(c);
            }
        }
        for c in &order {
            rows.insert(
                c,
                ComponentSummary {
                    component: c.to_string(),
                    done: 0,
                    failed: 0,
                    skipped: 0,
                    p50: None,
                    p90: None,
                    max: None,
                    note: None,
                },
            );
        }
        for o in self.servers.values() {
            for st in &o.steps {
                let Some(row) = rows.get_mut(st.component.as_str()) else {
                    continue;
                };
                match st.status {
                    StepStatus::Done => {
                        row.done += 1;
                        times
                            .entry(row_key(&order, &st.component))
                            .or_default()
                            .push(st.elapsed);
                    }
                    StepStatus::Failed => row.failed += 1,
                    StepStatus::NotRun => row.skipped += 1,
                    // Shown with the outage, not as a failure.
                    StepStatus::Unknown => {}
                }
            }
        }
        for s in plan.skips() {
            match (&s.server, &s.component) {
                (Some(_), Some(c)) => {
                    if let Some(row) = rows.get_mut(c.as_str()) {
                        row.skipped += 1;
                    }
                }
                (None, Some(c)) => {
                    if let Some(row) = rows.get_mut(c.as_str()) {
                        row.note = Some(s.reason.describe());
                    }
                }
                // A whole server left out: every component it would have
                // had counts it only when it blocks convergence.
                (Some(_), None) if s.blocking => {
                    for row in rows.values_mut().filter(|r| r.note.is_none()) {
                        row.skipped += 1;
                    }
                }
                _ => {}
            }
        }
        for (c, mut t) in times {
            t.sort();
            if let Some(row) = rows.get_mut(c) {
                row.p50 = Some(percentile_sorted(&t, 50.0));
                row.p90 = Some(percentile_sorted(&t, 90.0));
                row.max = t.last().copied();
            }
        }
        order.iter().filter_map(|c| rows.remove(c)).collect()
    }

    /// The final text: summary table, failures, timeouts, outliers, and a
    /// one-line verdict.
    pub fn render(&self, plan: &Plan) -> String {
        let mut out = String::new();
        self.write_table(plan, &mut out);
        self.write_failed(&mut out);
        self.write_outliers(&mut out);
        self.write_left_running(&mut out);
        self.write_safety(&mut out);
        self.write_lost(&mut out);
        self.write_records(&mut out);
        self.write_verdict(plan, &mut out);
        out
    }

    /// Components nothing happened to stay out of the table (they are in
    /// the JSON summary); a note (marlin-agent skipped in bulk) keeps a row.
    fn write_table(&self, plan: &Plan, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .summary(plan)
            .into_iter()
            .filter(|r| r.done + r.failed + r.skipped > 0 || r.note.is_some())
            .map(|r| {
                vec![
                    r.component,
                    r.done.to_string(),
                    r.failed.to_string(),
                    r.skipped.to_string(),
                    r.p50.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.p90.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.max.map(fmt_duration).unwrap_or_else(|| "-".into()),
                    r.note.unwrap_or_default(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push_str(&agentsadm_types::output::table(
                &[
                    "COMPONENT",
                    "DONE",
                    "FAILED",
                    "SKIPPED",
                    "P50",
                    "P90",
                    "MAX",
                    "NOTE",
                ],
                &rows,
            ));
        }
    }

    fn write_failed(&self, out: &mut String) {
        let failed: Vec<(&ServerUuid, &ServerOutcome)> = self
            .servers
            .iter()
            .filter(|(_, o)| matches!(o.status, ServerStatus::Failed | ServerStatus::TimedOut))
            .collect();
        if failed.is_empty() {
            return;
        }
        out.push_str("\nFailed:\n");
        for (uuid, o) in failed {
            let why = o
                .failure
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_else(|| o.status.as_str().to_string());
            let _ = writeln!(out, "  {} ({uuid}): {why}", o.hostname);
        }
    }

    fn write_outliers(&self, out: &mut String) {
        if self.outliers.is_empty() {
            return;
        }
        out.push_str("\nOutliers (slow servers):\n");
        for o in &self.outliers {
            let _ = writeln!(
                out,
                "  {} ({}): {} elapsed when flagged, {}",
                o.hostname,
                o.server,
                fmt_duration(o.elapsed),
                o.reference()
            );
        }
    }

    fn write_left_running(&self, out: &mut String) {
        let left: Vec<(&ServerUuid, &ServerOutcome)> = self
            .servers
            .iter()
            .filter(|(_, o)| o.status == ServerStatus::Interrupted)
            .collect();
        if !left.is_empty() {
            out.push_str(
                "\nLeft running when the run stopped waiting (they may still complete; follow a task with 'sdc-cnapi /tasks/<id>', or run the same command again):\n",
            );
            for (uuid, o) in left {
                let tasks = o.waiting_tasks();
                let what = if tasks.is_empty() {
                    "no CNAPI task (CNAPI execute)".to_string()
                } else {
                    tasks.join(", ")
                };
                let _ = writeln!(out, "  {} ({uuid}): {what}", o.hostname);
            }
        }
        let c = self.counts();
        if self.interrupted && c.not_started > 0 {
            let _ = writeln!(
                out,
                "\nInterrupted: {} not started; run the same command again to finish.",
                plural(c.not_started, "server was", "servers were")
            );
        }
    }

    /// The safety settings as they ended (an operator reading the summary
    /// sees how close the run came to its budget), why the run halted, and
    /// what intent was put back.
    fn write_safety(&self, out: &mut String) {
        let c = self.counts();
        let mut safety = Vec::new();
        if let Some(canary) = &self.canary {
            safety.push(format!(
                "canary {} {}",
                canary.servers.join(", "),
                if canary.passed { "passed" } else { "failed" }
            ));
        }
        if let Some(budget) = self.budget {
            let failures = c.failed + c.timed_out;
            // Servers in flight when the budget halted the run may fail
            // after it: the two counts are told apart, never left to
            // disagree.
            let after_halt = match self.halted {
                Some(Halted::Budget { failures: at, .. }) if failures > at => format!(
                    " ({at} when the run halted; {} already in flight then failed after)",
                    plural(failures - at, "server", "servers")
                ),
                _ => String::new(),
            };
            safety.push(format!(
                "{} of a failure budget of {budget}{after_halt}",
                if failures == 1 {
                    "1 failure".to_string()
                } else {
                    format!("{failures} failures")
                }
            ));
        }
        for p in self.pauses.iter().filter(|p| p.answered) {
            safety.push(format!(
                "{} did not answer for {} ({}): the run waited{}, and counted no server as failed for it",
                p.api,
                super::report::fmt_duration(p.waited),
                p.noticed,
                if p.restarted.is_empty() {
                    String::new()
                } else {
                    format!(" and started {} again", p.restarted.join(", "))
                }
            ));
        }
        if !safety.is_empty() {
            let mut line = safety.join("; ");
            line[..1].make_ascii_uppercase();
            let _ = writeln!(out, "\n{line}.");
        }
        // A lost lock or API has its own section (write_lost).
        if let Some(h) = self.halted.as_ref().filter(|h| match h {
            Halted::LockLost => self.lock_lost.is_none(),
            Halted::ApiLost { .. } => self.outage.is_none(),
            _ => true,
        }) {
            let _ = writeln!(out, "\n{h}");
        }
        let mut back = Vec::new();
        if self.service_changes_reverted > 0 {
            back.push(format!(
                "the default image of {} service{} (new servers get the previous build)",
                self.service_changes_reverted,
                if self.service_changes_reverted == 1 {
                    ""
                } else {
                    "s"
                }
            ));
        }
        let put_back: Vec<String> = self
            .intent_reverted
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| format!("{} on {}", r.component, r.hostname))
            .collect();
        if !put_back.is_empty() {
            back.push(format!(
                "params.image_uuid of the failed servers' instances ({})",
                put_back.join(", ")
            ));
        }
        if !back.is_empty() {
            let _ = writeln!(out, "Intent put back after the halt: {}.", back.join("; "));
        }
        let not_started = self
            .servers
            .values()
            .filter(|o| o.status == ServerStatus::NotStarted)
            .count();
        if not_started > 0 && (self.halted.is_some() || self.interrupted) {
            let _ = writeln!(
                out,
                "SAPI intent of the {not_started} server{} not started is as it was: nothing was written for {}.",
                if not_started == 1 { "" } else { "s" },
                if not_started == 1 { "it" } else { "them" }
            );
        }
        for r in self.intent_reverted.iter().filter(|r| r.error.is_some()) {
            let _ = writeln!(
                out,
                "warning: {} on {}: {}",
                r.component,
                r.hostname,
                r.error.as_deref().unwrap_or_default()
            );
        }
    }

    /// The servers this run started (it may have changed them), in the
    /// order servers are shown: `cn1 (uuid)`.
    pub fn touched(&self) -> Vec<String> {
        self.touched_servers()
            .into_iter()
            .map(|(h, u)| format!("{h} ({u})"))
            .collect()
    }

    /// [`ExecReport::touched`], as (hostname, server).
    pub fn touched_servers(&self) -> Vec<(&str, ServerUuid)> {
        let mut v: Vec<(&str, ServerUuid)> = self
            .servers
            .iter()
            .filter(|(_, o)| o.status != ServerStatus::NotStarted)
            .map(|(u, o)| (o.hostname.as_str(), *u))
            .collect();
        v.sort();
        v
    }

    /// A lost lock, an API that stopped answering, a lock not released:
    /// what it means for this summary, and what to do.
    fn write_lost(&self, out: &mut String) {
        if let Some(l) = &self.lock_lost {
            let touched = self.touched();
            let _ = writeln!(
                out,
                "\nThe datacenter lock was lost (noticed {}; its holder now: {}): nothing more was started.",
                l.noticed, l.holder
            );
            if touched.is_empty() {
                out.push_str("This run changed no server.\n");
            } else {
                let _ = writeln!(
                    out,
                    "This run changed these servers, and they may since have been changed by someone else, so the results above may no longer hold: {}.",
                    touched.join(", ")
                );
            }
            out.push_str(
                "Check them ('agentsadm list', 'agentsadm check'), then run the same command again once the lock is free.\n",
            );
        }
        if let Some(o) = &self.outage {
            let unknown: Vec<String> = self
                .servers
                .iter()
                .filter(|(_, s)| s.status == ServerStatus::Unknown)
                .map(|(u, s)| {
                    let tasks: Vec<String> = s
                        .tasks
                        .iter()
                        .map(|t| format!("{} task {}", t.component, t.task))
                        .collect();
                    if tasks.is_empty() {
                        format!("{} ({u})", s.hostname)
                    } else {
                        format!("{} ({u}): {}", s.hostname, tasks.join(", "))
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "\n{} stopped answering (noticed {}): nothing more was started, and no server was counted as failed.",
                o.api, o.noticed
            );
            if !unknown.is_empty() {
                let _ = writeln!(
                    out,
                    "How these servers ended is not known (their tasks may still complete; follow one with 'sdc-cnapi /tasks/<id>'): {}.",
                    unknown.join("; ")
                );
            }
            let _ = writeln!(
                out,
                "Once {} answers again, run the same command again: it carries on from what the servers report.",
                o.api
            );
        }
        if let Some(r) = &self.lock_release {
            let _ = writeln!(out, "warning: {r}");
        }
    }

    /// Record changes that were not made, with why.
    fn write_records(&self, out: &mut String) {
        let missed: Vec<_> = self.records.iter().filter(|r| !r.ok()).collect();
        if missed.is_empty() {
            return;
        }
        out.push_str("\nNot made:\n");
        for r in missed {
            let why = match &r.status {
                RecordStatus::Failed { message } => message.as_str(),
                RecordStatus::NotRun { reason } => reason.as_str(),
                _ => "",
            };
            let _ = writeln!(
                out,
                "  {}: {why}",
                agentsadm_plan::display::record_line(&r.change)
            );
        }
    }

    fn write_verdict(&self, plan: &Plan, out: &mut String) {
        let c = self.counts();
        let skipped = plan.skips().iter().filter(|s| s.blocking).count();
        if !self.servers.is_empty() || self.records.is_empty() {
            let verb = match plan.operation() {
                Operation::Update => "Updated",
                Operation::Install => "Installed on",
                Operation::Remove => "Removed from",
                Operation::Revert => "Reverted",
                _ => "Changed",
            };
            let _ = write!(
                out,
                "\n{verb} {} of {}",
                c.succeeded,
                plural(self.servers.len(), "server", "servers")
            );
        } else {
            let made = self.records.iter().filter(|r| r.ok()).count();
            let _ = write!(
                out,
                "\nMade {made} of {} record changes",
                self.records.len()
            );
        }
        let mut extra = Vec::new();
        if c.failed > 0 {
            extra.push(format!("{} failed", c.failed));
        }
        if c.timed_out > 0 {
            extra.push(format!("{} timed out", c.timed_out));
        }
        if c.interrupted > 0 {
            extra.push(format!("{} left running", c.interrupted));
        }
        if c.not_started > 0 {
            extra.push(format!("{} not started", c.not_started));
        }
        if c.stopped > 0 {
            extra.push(format!("{} stopped", c.stopped));
        }
        if c.unknown > 0 {
            extra.push(format!("{} unknown", c.unknown));
        }
        if skipped > 0 {
            extra.push(format!("{skipped} skipped, blocking"));
        }
        if !extra.is_empty() {
            let _ = write!(out, " ({})", extra.join(", "));
        }
        let _ = writeln!(out, " in {}.", fmt_duration(self.elapsed));
    }
}

/// `1 server`, `2 servers`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn row_key<'a>(order: &[&'a str], component: &str) -> &'a str {
    order
        .iter()
        .copied()
        .find(|c| *c == component)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Failure, FailureStage};

    /// A budget halt with servers still in flight that fail after it:
    /// the summary tells the failures at the halt from the total (the
    /// real CNAPI run said "5 failures of a failure budget of 2" beside
    /// "halted after 3 failures").
    #[test]
    fn failures_after_a_budget_halt_are_told_apart() {
        let mut report = ExecReport {
            budget: Some(2),
            halted: Some(Halted::Budget {
                failures: 3,
                budget: 2,
            }),
            ..ExecReport::default()
        };
        for n in 1..=5u128 {
            let mut o = ServerOutcome::new(&format!("cn{n}"));
            o.fail(
                ServerStatus::Failed,
                Failure {
                    component: None,
                    stage: FailureStage::Straggler,
                    message: "failed".into(),
                },
            );
            report.servers.insert(ServerUuid::from_u128(n), o);
        }
        let mut out = String::new();
        report.write_safety(&mut out);
        assert!(
            out.contains(
                "5 failures of a failure budget of 2 (3 when the run halted; 2 servers already in flight then failed after)"
            ) && out.contains("halted after 3 failures (budget 2)"),
            "{out}"
        );
    }
}
