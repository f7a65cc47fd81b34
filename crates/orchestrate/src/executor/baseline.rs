//! What is known about how long a server's turn should take, for judging
//! slow servers before a rollout has a median (fewer than
//! [`OutlierPolicy::min_finished`] servers done, which a small rollout
//! never gets past): [`KnownDurations`] holds the catalog's expected
//! install time of each component and, where earlier runs recorded it,
//! each server's own time for a component (run history feeds
//! [`KnownDurations::record_history`]; history wins over the catalog).
//!
//! A server's expected turn is its steps' batches one after the other, the
//! longest step of each batch (parallel-safe steps run together). It is an
//! outlier past `max(factor x expected, expected + margin)`, the same rule
//! as against the median ([`crate::outlier`]). A server whose every step
//! has a time of its own is judged against itself for the whole run, median
//! or not ([`outliers`]): one that is slow every time is no news, one
//! slower than itself is ("cn0042 usually takes 40.0s and is at 3m00s").
//! Pure: the executor feeds it tokio time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

pub use crate::vocabulary::outlier::OutlierBasis;
use crate::vocabulary::outlier::{self, Outlier, OutlierPolicy};
use crate::vocabulary::report::fmt_duration;
use agentsadm_plan::timing::Durations;
use agentsadm_plan::{Plan, ServerPlan};
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ServerUuid;

/// The expected duration of one server's turn, and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baseline {
    pub expected: Duration,
    /// [`OutlierBasis::History`] when every step's time came from the
    /// server's history, else [`OutlierBasis::Catalog`].
    pub basis: OutlierBasis,
}

/// What is known about install times before a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownDurations {
    /// Each component's expected install time (the catalog's).
    pub catalog: BTreeMap<String, Duration>,
    /// A server's own time for a component, from earlier runs.
    pub history: BTreeMap<(ServerUuid, String), Duration>,
}

impl KnownDurations {
    /// The catalog's expected times, no history.
    pub fn from_catalog(catalog: &Catalog) -> KnownDurations {
        let mut known = KnownDurations::default();
        known.add_catalog(catalog);
        known
    }

    /// Fill in the catalog's expected times (leaving history as it is).
    pub fn add_catalog(&mut self, catalog: &Catalog) {
        for c in catalog.iter() {
            self.catalog
                .insert(c.name.to_string(), c.expected_install());
        }
    }

    /// What an earlier run took on `server` for `component` (run history).
    pub fn record_history(&mut self, server: ServerUuid, component: &str, took: Duration) {
        self.history.insert((server, component.to_string()), took);
    }

    /// Every server's own times from the run history
    /// ([`crate::history::HistoryStore::durations`]).
    pub fn add_history(&mut self, durations: &Durations) {
        for (server, component, took) in durations.own() {
            self.record_history(server, component, took);
        }
    }

    fn step(&self, server: ServerUuid, component: &str) -> Option<(Duration, bool)> {
        if let Some(d) = self.history.get(&(server, component.to_string())) {
            return Some((*d, true));
        }
        self.catalog.get(component).map(|d| (*d, false))
    }

    /// A server's expected turn, or `None` when a step's time is unknown.
    pub fn server_baseline(&self, server: ServerUuid, sp: &ServerPlan) -> Option<Baseline> {
        let mut expected = Duration::ZERO;
        let mut all_history = !sp.steps.is_empty();
        for batch in sp.batches() {
            let mut longest = Duration::ZERO;
            for step in batch {
                let (d, from_history) = self.step(server, &step.component)?;
                all_history &= from_history;
                longest = longest.max(d);
            }
            expected += longest;
        }
        Some(Baseline {
            expected,
            basis: if all_history {
                OutlierBasis::History
            } else {
                OutlierBasis::Catalog
            },
        })
    }
}

/// Running servers that became outliers against their baseline (not
/// warned about before); for when the run has no median yet.
pub fn baseline_outliers<'a>(
    policy: &OutlierPolicy,
    running: impl IntoIterator<Item = (ServerUuid, &'a str, Duration, Option<Baseline>)>,
    warned: &BTreeSet<ServerUuid>,
) -> Vec<Outlier> {
    let mut out: Vec<Outlier> = running
        .into_iter()
        .filter(|(server, ..)| !warned.contains(server))
        .filter_map(|(server, hostname, elapsed, baseline)| {
            let b = baseline?;
            let limit = b
                .expected
                .mul_f64(policy.factor.max(1.0))
                .max(b.expected + policy.margin);
            (elapsed > limit).then(|| Outlier {
                server,
                hostname: hostname.to_string(),
                elapsed,
                median: b.expected,
                basis: b.basis,
            })
        })
        .collect();
    out.sort_by_key(|o| o.server);
    out
}

/// Running servers that just became outliers (not warned about before): a
/// server with a history of its own for every step against that, from the
/// start; the others against the median of `finished` once enough servers
/// finished, before that against their expected turn (where known).
pub fn outliers<'a>(
    policy: &OutlierPolicy,
    finished: &[Duration],
    running: impl IntoIterator<Item = (ServerUuid, &'a str, Duration, Option<Baseline>)>,
    warned: &BTreeSet<ServerUuid>,
) -> Vec<Outlier> {
    let with_median = finished.len() >= policy.min_finished.max(1);
    let (own, others): (Vec<_>, Vec<_>) = running
        .into_iter()
        .partition(|(.., b)| b.is_some_and(|b| b.basis == OutlierBasis::History));
    let mut out = baseline_outliers(policy, own, warned);
    if with_median {
        out.extend(outlier::new_outliers(
            policy,
            finished,
            others.into_iter().map(|(u, h, e, _)| (u, h, e)),
            warned,
        ));
    } else {
        out.extend(baseline_outliers(policy, others, warned));
    }
    out.sort_by_key(|o| o.server);
    out
}

impl Outlier {
    /// Why it is flagged, after its name: `usually takes 40.0s and is at
    /// 3m00s` against its own history, else `running for 3m00s, ` and
    /// [`Outlier::compared_with`].
    pub fn describe(&self) -> String {
        match self.basis {
            OutlierBasis::History => format!(
                "usually takes {} and is at {}",
                fmt_duration(self.median),
                fmt_duration(self.elapsed)
            ),
            OutlierBasis::Median | OutlierBasis::Catalog => format!(
                "running for {}, {}",
                fmt_duration(self.elapsed),
                self.compared_with()
            ),
        }
    }

    /// What it was compared with, for messages: `the median server took
    /// 633ms`, `expected 1m00s (the catalog's)`, `its own earlier runs took
    /// 40.0s`.
    pub fn compared_with(&self) -> String {
        let d = fmt_duration(self.median);
        match self.basis {
            OutlierBasis::Median => format!("the median server took {d}"),
            OutlierBasis::Catalog => format!("expected {d} (the catalog's install times)"),
            OutlierBasis::History => format!("it took {d} in earlier runs"),
        }
    }

    /// The reference alone, for a live row: `median 633ms`, `expected
    /// 1m00s`, `usually 40.0s`.
    pub fn reference(&self) -> String {
        let d = fmt_duration(self.median);
        match self.basis {
            OutlierBasis::Median => format!("median {d}"),
            OutlierBasis::Catalog => format!("expected {d}"),
            OutlierBasis::History => format!("usually {d}"),
        }
    }
}

/// How slow servers of `plan` will be judged, when the rollout is too
/// small for a median (at most [`OutlierPolicy::min_finished`] servers):
/// against what is known, or (said so) not at all. `None` for a rollout
/// large enough.
pub fn judgement(plan: &Plan, known: &KnownDurations, policy: &OutlierPolicy) -> Option<String> {
    let servers = plan.servers().len();
    let needed = policy.min_finished.max(1);
    if servers == 0 || servers > needed {
        return None;
    }
    let mut unknown: BTreeSet<&str> = BTreeSet::new();
    let mut expected: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut history = 0;
    for (uuid, sp) in plan.servers() {
        for step in &sp.steps {
            match known.step(*uuid, &step.component) {
                Some((d, from_history)) => {
                    history += usize::from(from_history);
                    expected.entry(step.component.as_str()).or_insert(d);
                }
                None => {
                    unknown.insert(step.component.as_str());
                }
            }
        }
    }
    let mut text = format!(
        "Slow servers: {} to change, too few for a median ({needed} must finish first); ",
        agentsadm_types::output::plural(servers, "server", "servers")
    );
    if !unknown.is_empty() {
        let _ = write!(
            text,
            "not enough to judge {} (no expected install time): only --straggler-timeout and --task-timeout stop a server that hangs",
            unknown.into_iter().collect::<Vec<_>>().join(", ")
        );
        return Some(text);
    }
    let times: Vec<String> = expected
        .iter()
        .map(|(c, d)| format!("{c} {}", fmt_duration(*d)))
        .collect();
    let _ = write!(
        text,
        "each is judged against {} ({})",
        if history > 0 {
            "its own earlier runs where known, else the catalog's expected install times"
        } else {
            "the catalog's expected install times"
        },
        times.join(", ")
    );
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: u128) -> ServerUuid {
        ServerUuid::from_u128(n)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_hung_server_is_an_outlier_against_its_baseline() {
        let p = OutlierPolicy::default();
        let b = Some(Baseline {
            expected: secs(60),
            basis: OutlierBasis::Catalog,
        });
        // max(3 x 60 s, 60 s + 30 s) = 180 s.
        let at = |e: u64| baseline_outliers(&p, [(server(1), "cn1", secs(e), b)], &BTreeSet::new());
        assert!(at(180).is_empty());
        let o = at(181);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].basis, OutlierBasis::Catalog);
        assert_eq!(
            o[0].compared_with(),
            "expected 1m00s (the catalog's install times)"
        );
        assert_eq!(o[0].reference(), "expected 1m00s");
        // Nothing known: no judgement.
        assert!(
            baseline_outliers(
                &p,
                [(server(1), "cn1", secs(10_000), None)],
                &BTreeSet::new()
            )
            .is_empty()
        );
        // Warned once.
        let warned: BTreeSet<_> = [server(1)].into();
        assert!(baseline_outliers(&p, [(server(1), "cn1", secs(999), b)], &warned).is_empty());
    }

    #[test]
    fn a_server_with_history_is_judged_against_itself() {
        let p = OutlierPolicy::default();
        let own = |s: u64| {
            Some(Baseline {
                expected: secs(s),
                basis: OutlierBasis::History,
            })
        };
        // Nothing finished yet: cn0042 usually takes 40 s and is at 3 min;
        // cn7 usually takes 5 min (slow every time) and is at 4 min; cn9
        // has no history and no median to compare with.
        let running = vec![
            (server(42), "cn0042", secs(180), own(40)),
            (server(7), "cn7", secs(240), own(300)),
            (server(9), "cn9", secs(240), None),
        ];
        let flagged = outliers(&p, &[], running.clone(), &BTreeSet::new());
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(flagged[0].hostname, "cn0042");
        assert_eq!(flagged[0].basis, OutlierBasis::History);
        assert_eq!(flagged[0].median, secs(40));
        assert_eq!(flagged[0].describe(), "usually takes 40.0s and is at 3m00s");
        assert_eq!(flagged[0].reference(), "usually 40.0s");
        // With a fleet median of 10 s, cn7 is still judged against itself
        // (no warning); cn9 is judged against the fleet.
        let flagged = outliers(&p, &[secs(10); 5], running, &BTreeSet::new());
        let names: Vec<(&str, OutlierBasis)> = flagged
            .iter()
            .map(|o| (o.hostname.as_str(), o.basis))
            .collect();
        assert_eq!(
            names,
            [
                ("cn9", OutlierBasis::Median),
                ("cn0042", OutlierBasis::History)
            ]
        );
        assert_eq!(
            flagged[0].describe(),
            "running for 4m00s, the median server took 10.0s"
        );
    }

    #[test]
    fn the_history_of_each_server_and_component_is_known() {
        use agentsadm_plan::timing::Sample;
        let d =
            Durations::from_samples([(1, 10), (1, 30), (1, 20), (2, 50)].map(|(s, t)| Sample {
                server: server(s),
                component: "vm-agent".into(),
                elapsed: secs(t),
                outcome: agentsadm_plan::timing::SampleOutcome::Completed,
            }));
        let mut known = KnownDurations::default();
        known.add_history(&d);
        assert_eq!(known.step(server(1), "vm-agent"), Some((secs(20), true)));
        assert_eq!(known.step(server(2), "vm-agent"), Some((secs(50), true)));
        assert_eq!(known.step(server(3), "vm-agent"), None);
    }

    #[test]
    fn history_wins_over_the_catalog() {
        let mut known = KnownDurations::default();
        known.catalog.insert("vm-agent".into(), secs(60));
        assert_eq!(known.step(server(1), "vm-agent"), Some((secs(60), false)));
        known.record_history(server(1), "vm-agent", secs(40));
        assert_eq!(known.step(server(1), "vm-agent"), Some((secs(40), true)));
        assert_eq!(known.step(server(2), "vm-agent"), Some((secs(60), false)));
        assert_eq!(known.step(server(2), "nosuch"), None);
    }
}
