//! `agentsadm demo`: the script of the story (which simulated servers play
//! which part, the faults, the newer builds), what it counts while the real
//! commands run, and its closing summary. The commands themselves run in
//! process against a simulated datacenter in [`crate::cli::demo`].
//!
//! The cast is a pure function of the number of compute nodes, so the story
//! reads the same at 12 servers (the smoke test) and at 200 (the README):
//!
//! - cn0003..cn0005 are Manta storage servers (marlin-agent, named
//!   explicitly; bulk updates skip it);
//! - the last two compute nodes are new: left not set up by the simulator
//!   and set up through CNAPI during the story;
//! - cn0001, first in the orchestrator's order, is the canary of the bad
//!   build on a datacenter without history, and catches it; cn0002 is the
//!   canary of the fixed build, cn0001 being passed over (its last
//!   vm-agent step failed). The planner picks them; the story names the
//!   servers the plan picked;
//! - three servers are slow (every install takes `slow_factor` times
//!   longer), one fails every install, and one is deleted at the end;
//!   they are spread through the hostname order, the order the orchestrator
//!   works in, so the slow ones run alongside ordinary servers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use agentsadm_api::sapi::Instance;

use agentsadm_api::sapi::Service;
use agentsadm_orchestrate::report::ExecEvent;
use agentsadm_orchestrate::report::Reporter;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_orchestrate::report::fmt_duration;
use agentsadm_plan::intent::Intent;
use agentsadm_plan::reality::Reality;
use agentsadm_sim::Distribution;
use agentsadm_sim::LatencySpec;
use agentsadm_types::catalog::Catalog;

/// The smallest fleet the story fits in: the two canaries, three Manta
/// servers, three slow, one failing, one to delete, two new.
pub const MIN_SERVERS: usize = 12;

/// The components that get a newer build in act 5, in the order they are
/// published. marlin-agent is among them so that the bulk update has a
/// reason to skip it.
pub const NEWER_COMPONENTS: [&str; 5] = [
    "config-agent",
    "vm-agent",
    "net-agent",
    "cn-agent",
    "marlin-agent",
];

/// The version of the newer builds (the simulator seeds 1.0.0).
pub const NEWER_VERSION: &str = "1.1.0";

/// The component whose newer build is bad: its service goes to
/// maintenance on every server (act 7), until the fixed build
/// [`FIXED_VERSION`] is published (act 8).
pub const BAD_COMPONENT: &str = "vm-agent";

/// The version of the fixed build of [`BAD_COMPONENT`].
pub const FIXED_VERSION: &str = "1.1.1";

/// `--max-per-rack` of the rollout of the fixed build.
pub const ROLLOUT_MAX_PER_RACK: usize = 8;

/// The channel of the updates server the newer builds are published in.
pub const CHANNEL: &str = "release";

/// The story cannot be told as asked.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(
        "the demo needs at least {min} compute nodes, not {servers}: pass --servers {min} or more"
    )]
    TooFewServers { servers: usize, min: usize },
}

/// Who plays which part, by hostname.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cast {
    /// Compute nodes besides the headnode.
    pub servers: usize,
    /// The first server by hostname, the canary the planner picks when
    /// there is no history (the story narrates the plan's pick): neither
    /// slow (a slow canary holds up the whole fleet) nor failing.
    pub canary: String,
    /// The canary of the fixed build: the next by hostname, `canary`
    /// being passed over (the bad build failed its gate there); ordinary
    /// too.
    pub next_canary: String,
    /// Manta storage servers: marlin-agent is installed there.
    pub manta: Vec<String>,
    /// Not set up when the datacenter starts; set up during the story.
    pub new_servers: Vec<String>,
    /// Installs take `slow_factor` times longer there.
    pub slow: Vec<String>,
    /// Every install there fails until the fault is cleared.
    pub failing: String,
    /// Deleted (with its SAPI instances) at the end.
    pub deleted: String,
}

/// The hostname the simulator gives compute node `index` (1-based) in a
/// datacenter of `servers` compute nodes: `cn0001`, or wider past 9999.
pub fn hostname(index: usize, servers: usize) -> String {
    let width = servers.to_string().len().max(4);
    format!("cn{index:0width$}")
}

impl Cast {
    /// The cast for `servers` compute nodes.
    pub fn new(servers: usize) -> Result<Cast, DemoError> {
        if servers < MIN_SERVERS {
            return Err(DemoError::TooFewServers {
                servers,
                min: MIN_SERVERS,
            });
        }
        let mut taken: BTreeSet<usize> = [1, 2, 3, 4, 5, servers - 1, servers].into();
        // The free compute node nearest after (else before) a fraction of
        // the fleet; new servers stay out of the picks.
        let mut pick = |fraction: f64| -> usize {
            let want = ((servers as f64 * fraction).round() as usize).clamp(1, servers - 2);
            let free = (want..=servers - 2)
                .chain((1..want).rev())
                .find(|i| !taken.contains(i))
                .expect("MIN_SERVERS leaves free compute nodes");
            taken.insert(free);
            free
        };
        // In the first half: a slow server holds its slot about ten times
        // longer than the others, so one late in the order would be the
        // rollout's tail.
        let slow = [pick(0.12), pick(0.3), pick(0.5)];
        let failing = pick(0.33);
        let deleted = pick(0.6);
        let name = |i: usize| hostname(i, servers);
        Ok(Cast {
            servers,
            canary: name(1),
            next_canary: name(2),
            manta: (3..=5).map(name).collect(),
            new_servers: vec![name(servers - 1), name(servers)],
            slow: slow.into_iter().map(name).collect(),
            failing: name(failing),
            deleted: name(deleted),
        })
    }
}

/// The simulated install timings of the rollout (act 6).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timings {
    /// Every install on every server.
    pub install_latency: LatencySpec,
    /// How much slower the slow servers are.
    pub slow_factor: f64,
    /// `--outlier-margin`: the orchestrator's default of 30 s would hide
    /// outliers in a rollout whose servers take well under a second.
    pub outlier_margin: Duration,
    /// `--outlier-factor`: lower than the default 3, see [`Timings::standard`].
    pub outlier_factor: f64,
}

impl Timings {
    /// Installs of 60-140 ms, slow servers twenty times slower. Outlier
    /// checks run once a second and flag a server past
    /// `max(2 x median, median + margin)`. The slow servers' time is a
    /// sleep, the ordinary servers' is mostly the simulator's own work, so
    /// a busy machine narrows the gap: on a loaded 2-core machine ordinary
    /// servers took 2.1 s (median) and a slow one finished in under 7 s,
    /// before the default factor's 6.3 s mark was checked; with a factor
    /// of 2 the mark is 4.2 s there (1.4 s on an idle machine) and a slow
    /// server (three batches of 1.2-2.8 s) is flagged while it runs.
    pub fn standard() -> Timings {
        Timings {
            install_latency: LatencySpec {
                base_ms: 60,
                jitter_ms: 80,
                distribution: Distribution::Uniform,
            },
            slow_factor: 20.0,
            outlier_margin: Duration::from_secs(1),
            outlier_factor: 2.0,
        }
    }

    /// `--outlier-factor` as the command line takes it.
    pub fn factor_arg(&self) -> String {
        self.outlier_factor.to_string()
    }

    /// `--outlier-margin` as the command line takes it.
    pub fn margin_arg(&self) -> String {
        humantime::format_duration(self.outlier_margin).to_string()
    }
}

/// What the orchestrator did across the story, from its execution events
/// (every command run in process sends them to a [`Tally`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TallyCounts {
    /// Installs, upgrades and removals that completed.
    pub steps_done: usize,
    /// Steps that failed.
    pub steps_failed: usize,
    /// Servers that ended failed or timed out, with how many times.
    pub servers_failed: BTreeMap<String, usize>,
    /// Servers flagged as outliers, in the order the warnings came.
    pub outliers: Vec<String>,
    /// Each run's canary wave (hostnames, in the plan's order), in the
    /// order the runs finished: the plan picks the canaries, the story
    /// names the ones it picked.
    pub canaries: Vec<Vec<String>>,
}

/// A [`Reporter`] that counts steps, failed servers and outliers.
#[derive(Debug, Default)]
pub struct Tally {
    counts: Mutex<TallyCounts>,
}

impl Tally {
    pub fn counts(&self) -> TallyCounts {
        self.counts
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

impl Reporter for Tally {
    fn event(&self, event: &ExecEvent<'_>) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            ExecEvent::StepFinished { failure, .. } => {
                if failure.is_some() {
                    c.steps_failed += 1;
                } else {
                    c.steps_done += 1;
                }
            }
            ExecEvent::ServerFinished { outcome, .. }
                if matches!(
                    outcome.status,
                    ServerStatus::Failed | ServerStatus::TimedOut
                ) =>
            {
                *c.servers_failed
                    .entry(outcome.hostname.clone())
                    .or_default() += 1;
            }
            ExecEvent::Outlier(o) => c.outliers.push(o.hostname.clone()),
            ExecEvent::Finished(report) => {
                if let Some(canary) = &report.canary {
                    c.canaries.push(canary.servers.clone());
                }
            }
            _ => {}
        }
    }
}

/// SAPI agent instances against what the servers CNAPI lists report: one
/// instance per (server, managed component) is the goal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Census {
    /// Servers CNAPI lists.
    pub servers: usize,
    /// Every `type=agent` instance in SAPI.
    pub instances: usize,
    /// Managed components the servers report: the instances there should be.
    pub expected: usize,
    /// Reported components with an instance tied to their server.
    pub matched: usize,
    /// Instances no listed server can be tied to (deleted servers...).
    pub unlinked: usize,
    /// Second instances for one (server, component).
    pub duplicates: usize,
}

impl Census {
    /// Count (pure): the same indexing `list`, `update` and `check` use.
    pub fn take(
        catalog: &Catalog,
        servers: &[agentsadm_api::cnapi::Server],
        services: &[Service],
        instances: &[Instance],
    ) -> Census {
        let reality = Reality::from_servers(catalog, servers);
        let intent = Intent::build(catalog, services, instances, &reality);
        let mut expected = 0;
        let mut matched = 0;
        for s in reality.servers.values() {
            for name in s.components.keys() {
                if intent.is_managed(name) {
                    expected += 1;
                    if intent.instance(&s.uuid, name).is_some() {
                        matched += 1;
                    }
                }
            }
        }
        Census {
            servers: reality.servers.len(),
            instances: instances.len(),
            expected,
            matched,
            unlinked: intent.unlinked.len(),
            duplicates: intent.duplicates.len(),
        }
    }

    /// One instance per (server, component), and nothing else.
    pub fn is_exact(&self) -> bool {
        self.instances == self.expected
            && self.matched == self.expected
            && self.unlinked == 0
            && self.duplicates == 0
    }
}

/// How long one act took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ActTime {
    pub number: usize,
    pub title: String,
    pub elapsed: Duration,
}

/// Everything the closing summary shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub acts: Vec<ActTime>,
    pub total: Duration,
    /// Servers the datacenter started with (headnode included).
    pub servers_started: usize,
    /// `agentsadm` commands run.
    pub commands: usize,
    pub tally: TallyCounts,
    pub census: Census,
    /// Commands whose exit status was not what the story expects.
    pub surprises: Vec<String>,
}

impl Summary {
    /// The summary as the last screen of the demo.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let t = &self.tally;
        let _ = writeln!(
            out,
            "Ran {} agentsadm commands in {} acts.",
            self.commands,
            self.acts.len()
        );
        let _ = writeln!(
            out,
            "Servers: {} at the start (headnode included), {} listed by CNAPI now.",
            self.servers_started, self.census.servers
        );
        let _ = writeln!(
            out,
            "Installs, upgrades and removals done: {}; failed: {}.",
            t.steps_done, t.steps_failed
        );
        let failed: Vec<String> = t
            .servers_failed
            .iter()
            .map(|(h, n)| {
                if *n == 1 {
                    h.clone()
                } else {
                    format!("{h} ({n} runs)")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "Failed servers: {}.",
            if failed.is_empty() {
                "none".to_string()
            } else {
                failed.join(", ")
            }
        );
        let _ = writeln!(
            out,
            "Outliers flagged: {}.",
            if t.outliers.is_empty() {
                "none".to_string()
            } else {
                t.outliers.join(", ")
            }
        );
        let c = &self.census;
        let _ = writeln!(
            out,
            "SAPI agent instances: {} (expected {}: one per server and managed component; {} matched, {} unlinked, {} duplicates){}.",
            c.instances,
            c.expected,
            c.matched,
            c.unlinked,
            c.duplicates,
            if c.is_exact() {
                ", exact"
            } else {
                ", NOT exact"
            }
        );
        let rows: Vec<Vec<String>> = self
            .acts
            .iter()
            .map(|a| {
                vec![
                    a.number.to_string(),
                    a.title.clone(),
                    fmt_duration(a.elapsed),
                ]
            })
            .collect();
        let _ = write!(
            out,
            "\n{}",
            agentsadm_types::output::table(&["ACT", "WHAT", "TIME"], &rows)
        );
        let _ = writeln!(out, "Total: {}.", fmt_duration(self.total));
        for s in &self.surprises {
            let _ = writeln!(out, "unexpected: {s}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cast_parts_are_distinct_and_fit_the_fleet() {
        for n in [MIN_SERVERS, 13, 50, 200, 12_000] {
            let c = Cast::new(n).unwrap();
            let mut all: Vec<&String> = c
                .manta
                .iter()
                .chain([&c.canary, &c.next_canary])
                .chain(&c.new_servers)
                .chain(&c.slow)
                .chain([&c.failing, &c.deleted])
                .collect();
            let count = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), count, "{n}: {c:?}");
            assert_eq!(c.new_servers.last(), Some(&hostname(n, n)));
            assert_eq!(c.manta[0], hostname(3, n));
        }
        let c = Cast::new(200).unwrap();
        assert_eq!(c.slow, ["cn0024", "cn0060", "cn0100"]);
        assert_eq!(c.failing, "cn0066");
        assert_eq!(c.new_servers, ["cn0199", "cn0200"]);
        assert_eq!(hostname(7, 12_000), "cn00007");
        assert!(matches!(
            Cast::new(MIN_SERVERS - 1),
            Err(DemoError::TooFewServers { .. })
        ));
    }

    #[test]
    fn tally_counts_steps_failures_and_outliers() {
        use agentsadm_orchestrate::outlier::Outlier;
        use agentsadm_orchestrate::report::ServerOutcome;
        let t = Tally::default();
        let server = agentsadm_types::ids::ServerUuid::from_u128(1);
        let failed = ServerOutcome {
            hostname: "cn0007".into(),
            status: ServerStatus::Failed,
            elapsed: Duration::from_secs(1),
            steps: Vec::new(),
            failure: None,
            tasks: Vec::new(),
            gates: Vec::new(),
            revert: None,
            also_reverted: Vec::new(),
            replaced: Vec::new(),
        };
        t.event(&ExecEvent::ServerFinished {
            server,
            outcome: &failed,
        });
        t.event(&ExecEvent::Outlier(&Outlier {
            server,
            hostname: "cn0006".into(),
            elapsed: Duration::from_secs(3),
            median: Duration::from_secs(1),
            basis: Default::default(),
        }));
        let c = t.counts();
        assert_eq!(c.servers_failed.get("cn0007"), Some(&1));
        assert_eq!(c.outliers, ["cn0006"]);
    }

    #[test]
    fn census_of_the_example_datacenter_is_exact_until_an_instance_goes() {
        let mut dc = agentsadm_sim::testkit::ExampleDc::new(3);
        let catalog = Catalog::builtin();
        let take = |dc: &agentsadm_sim::testkit::ExampleDc| {
            Census::take(
                &catalog,
                &dc.server_list(),
                &dc.services,
                &dc.instance_list(),
            )
        };
        let c = take(&dc);
        assert!(c.is_exact(), "{c:?}");
        assert_eq!(c.servers, 4);
        let cn1 = dc.server_named("cn001");
        dc.drop_instance(cn1, "vm-agent");
        let c = take(&dc);
        assert!(!c.is_exact());
        assert_eq!(c.expected, c.matched + 1);
    }
}
