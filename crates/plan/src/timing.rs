//! What each server took before: expected step durations from the run
//! history, read before planning (the I/O is the orchestrator's), so that
//! the planner can start the servers expected to take longest first and
//! show when the rollout should finish.
//!
//! Real fleets have servers that are slow every time (older hardware, busy
//! pools, far racks); a fresh install's latency is that server's usual
//! speed times some noise. So the estimate for a (server, component) is,
//! best first:
//!
//! - [`Source::Own`]: the median of the server's own recent durations for
//!   the component;
//! - [`Source::Scaled`]: never seen with this component, but seen with
//!   others: the fleet's median for the component times how much slower
//!   or faster than the fleet the server usually is;
//! - [`Source::Fleet`]: the fleet's median for the component.
//!
//! No estimate at all when no server has recorded the component.
//!
//! Only completed steps are durations: a step that failed, timed out or
//! was interrupted says nothing about how fast the server is (a server
//! whose installs fail at once would look the quickest and become the
//! canary of every rollout). Failures are kept apart: a server whose
//! newest step of a component failed is no canary for that component
//! ([`Durations::failed_last`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::request::TransportKind;
use crate::types::{Gate, ServerPlan};
use agentsadm_types::catalog::OrderClass;
use agentsadm_types::ids::ServerUuid;

/// Recorded durations kept per (server, component): the newest ones; a
/// server that changed (new disks, a move) is judged on what it does now.
pub const SAMPLES_KEPT: usize = 5;

/// One recorded step: how long `component` took on `server`, and how it
/// ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub server: ServerUuid,
    pub component: String,
    pub elapsed: Duration,
    pub outcome: SampleOutcome,
}

/// How a recorded step ended, as far as the server's record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleOutcome {
    /// Ran to the end: its time is the server's speed.
    Completed,
    /// Failed or timed out on the server: no speed, and a mark against the
    /// server as a canary for the component until a step completes.
    Failed,
}

/// Where an estimate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The server's own history with the component.
    Own,
    /// The fleet's median for the component, times the server's usual
    /// speed relative to the fleet (seen with other components).
    Scaled,
    /// The fleet's median for the component.
    Fleet,
}

/// An estimate for one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    pub duration: Duration,
    pub source: Source,
}

/// Expected durations per (server, component), from history. Built once
/// before planning; the planner only reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Durations {
    /// Median of each (server, component)'s newest samples.
    own: BTreeMap<ServerUuid, BTreeMap<String, Duration>>,
    /// Median over servers of the per-server medians, by component.
    fleet: BTreeMap<String, Duration>,
    /// A server's usual time over the fleet's (1.0: typical), from the
    /// components it was seen with.
    speed: BTreeMap<ServerUuid, f64>,
    /// (server, component)s whose newest recorded step failed.
    failed_last: BTreeMap<ServerUuid, Vec<String>>,
    /// The median time of each component's `gz health` gate (part of its
    /// steps' recorded durations), where history kept it
    /// ([`Durations::with_gates`]).
    gates: BTreeMap<String, Duration>,
}

impl Durations {
    /// Estimates from samples given oldest first (only the newest
    /// [`SAMPLES_KEPT`] of each server and component count).
    pub fn from_samples(samples: impl IntoIterator<Item = Sample>) -> Durations {
        let mut kept: BTreeMap<(ServerUuid, String), Vec<Duration>> = BTreeMap::new();
        let mut newest_failed: BTreeMap<(ServerUuid, String), bool> = BTreeMap::new();
        for s in samples {
            newest_failed.insert(
                (s.server, s.component.clone()),
                s.outcome == SampleOutcome::Failed,
            );
            if s.outcome != SampleOutcome::Completed {
                continue;
            }
            let v = kept.entry((s.server, s.component)).or_default();
            v.push(s.elapsed);
            if v.len() > SAMPLES_KEPT {
                v.remove(0);
            }
        }
        let mut failed_last: BTreeMap<ServerUuid, Vec<String>> = BTreeMap::new();
        for ((server, component), failed) in newest_failed {
            if failed {
                failed_last.entry(server).or_default().push(component);
            }
        }
        let mut own: BTreeMap<ServerUuid, BTreeMap<String, Duration>> = BTreeMap::new();
        let mut per_component: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for ((server, component), v) in kept {
            let m = median(&v);
            per_component.entry(component.clone()).or_default().push(m);
            own.entry(server).or_default().insert(component, m);
        }
        let fleet: BTreeMap<String, Duration> = per_component
            .into_iter()
            .map(|(c, v)| (c, median(&v)))
            .collect();
        let speed = own
            .iter()
            .filter_map(|(server, components)| {
                let mut ratios: Vec<f64> = components
                    .iter()
                    .filter_map(|(c, d)| {
                        let f = fleet.get(c)?.as_secs_f64();
                        (f > 0.0).then(|| d.as_secs_f64() / f)
                    })
                    .collect();
                ratios.sort_by(f64::total_cmp);
                ratios.get(ratios.len() / 2).map(|r| (*server, *r))
            })
            .collect();
        Durations {
            own,
            fleet,
            speed,
            failed_last,
            gates: BTreeMap::new(),
        }
    }

    /// The same, knowing how long `component`'s `gz health` gates took
    /// (recorded gate times, any server; the median of each component's
    /// counts). A gate overlaps the next
    /// components' installs on its server, so a server's expected time is
    /// no longer the sum of its steps' ([`Durations::server_expected`]).
    pub fn with_gates(mut self, gates: impl IntoIterator<Item = (String, Duration)>) -> Durations {
        let mut seen: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for (component, took) in gates {
            seen.entry(component).or_default().push(took);
        }
        self.gates = seen.into_iter().map(|(c, v)| (c, median(&v))).collect();
        self
    }

    /// Whether the newest recorded step of `component` on `server` failed
    /// (a completed one since clears it).
    pub fn failed_last(&self, server: &ServerUuid, component: &str) -> bool {
        self.failed_last
            .get(server)
            .is_some_and(|c| c.iter().any(|n| n == component))
    }

    /// Each server's own time for each component it was seen with (the
    /// median of its newest samples).
    pub fn own(&self) -> impl Iterator<Item = (ServerUuid, &str, Duration)> + '_ {
        self.own.iter().flat_map(|(server, components)| {
            components
                .iter()
                .map(move |(c, d)| (*server, c.as_str(), *d))
        })
    }

    /// No durations at all (failures alone are no estimate).
    pub fn is_empty(&self) -> bool {
        self.fleet.is_empty()
    }

    /// The estimate for `component` on `server`, if any server did it.
    pub fn expected(&self, server: &ServerUuid, component: &str) -> Option<Expected> {
        if let Some(d) = self.own.get(server).and_then(|c| c.get(component)) {
            return Some(Expected {
                duration: *d,
                source: Source::Own,
            });
        }
        let fleet = *self.fleet.get(component)?;
        Some(match self.speed.get(server) {
            Some(f) => Expected {
                duration: fleet.mul_f64(f.max(0.0)),
                source: Source::Scaled,
            },
            None => Expected {
                duration: fleet,
                source: Source::Fleet,
            },
        })
    }

    /// How long a server's steps should take: its batches one after the
    /// other, and the `gz health` gates overlapping the installs after
    /// them, as the executor runs them: a batch starts once the one before
    /// it installed, except after a core-first component, whose gate is
    /// waited for. Within a batch the cn-agent tasks run at once (as long
    /// as the longest), then the steps through `agentsadm gz`: those that
    /// share one `gz install` ([`ServerPlan::execute_groups`]) as long as
    /// the longest of them (the installer runs them at once, their gates
    /// overlapping), each other one after the other (each run holds the
    /// server's lock, its gate inside it). A step's install is its
    /// recorded time less its `gz health` gate's
    /// ([`Durations::with_gates`]; without gate times, each step's whole
    /// time). `None` without an estimate for any step; steps without one
    /// count as the batch's others. The flag says whether every step's
    /// estimate is the server's own.
    pub fn server_expected(
        &self,
        server: &ServerUuid,
        plan: &ServerPlan,
    ) -> Option<(Duration, bool)> {
        // `installed`: when the batch before is installed; `end`: when
        // the last gate started so far is over.
        let (mut installed, mut end) = (Duration::ZERO, Duration::ZERO);
        let mut any = false;
        let mut all_own = true;
        let together: Vec<usize> = plan.execute_groups().into_iter().flatten().collect();
        let mut at = 0;
        for batch in plan.batches() {
            // The longest cn-agent task, the execute steps one after the
            // other, the longest of those sharing one execute.
            let (mut tasks, mut alone, mut shared) =
                (Duration::ZERO, Duration::ZERO, Duration::ZERO);
            let mut gates = Vec::new();
            for (k, step) in batch.iter().enumerate() {
                let gate = match step.gate {
                    Gate::GzHealth => self.gates.get(step.component.as_str()).copied(),
                    _ => None,
                };
                let Some(e) = self.expected(server, &step.component) else {
                    all_own = false;
                    continue;
                };
                any = true;
                all_own &= e.source == Source::Own;
                let gate = gate.unwrap_or_default().min(e.duration);
                let install = e.duration - gate;
                gates.push(gate);
                if together.contains(&(at + k)) {
                    shared = shared.max(install);
                } else if batch.len() > 1 && step.transport != TransportKind::InstallAgent {
                    alone += install;
                } else {
                    tasks = tasks.max(install);
                }
            }
            at += batch.len();
            installed += tasks + shared + alone;
            for gate in gates {
                end = end.max(installed + gate);
            }
            if batch.iter().any(|st| st.order == OrderClass::CoreFirst) {
                installed = installed.max(end);
            }
        }
        any.then_some((installed.max(end), all_own))
    }
}

/// The median (upper, for an even count) of non-empty durations.
fn median(v: &[Duration]) -> Duration {
    let mut sorted = v.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::ids::ImageUuid;

    fn s(server: u128, component: &str, secs: u64) -> Sample {
        Sample {
            server: ServerUuid::from_u128(server),
            component: component.into(),
            elapsed: Duration::from_secs(secs),
            outcome: SampleOutcome::Completed,
        }
    }

    fn failed(server: u128, component: &str, secs: u64) -> Sample {
        Sample {
            outcome: SampleOutcome::Failed,
            ..s(server, component, secs)
        }
    }

    #[test]
    fn failures_are_no_speed_and_mark_the_server_until_a_step_completes() {
        let d = Durations::from_samples([
            s(1, "vm-agent", 10),
            s(2, "vm-agent", 20),
            // Server 3 fails in a fraction of a second every time.
            failed(3, "vm-agent", 0),
            failed(3, "vm-agent", 0),
            // Server 4 failed once, then completed.
            failed(4, "vm-agent", 0),
            s(4, "vm-agent", 30),
        ]);
        let server = ServerUuid::from_u128;
        // No own time for server 3: its failures are not its speed.
        assert_eq!(
            d.expected(&server(3), "vm-agent").map(|e| e.source),
            Some(Source::Fleet)
        );
        assert_eq!(
            d.expected(&server(4), "vm-agent").map(|e| e.duration),
            Some(Duration::from_secs(30))
        );
        assert!(d.failed_last(&server(3), "vm-agent"));
        assert!(!d.failed_last(&server(3), "net-agent"));
        assert!(!d.failed_last(&server(4), "vm-agent"));
        assert!(!d.failed_last(&server(1), "vm-agent"));
        // Failures alone are no history to schedule from.
        assert!(Durations::from_samples([failed(1, "vm-agent", 0)]).is_empty());
    }

    #[test]
    fn own_history_first_then_scaled_then_fleet() {
        let d = Durations::from_samples([
            s(1, "vm-agent", 10),
            s(2, "vm-agent", 20),
            s(3, "vm-agent", 30),
            // Server 4 is twice as slow as the fleet at net-agent.
            s(1, "net-agent", 5),
            s(2, "net-agent", 5),
            s(4, "net-agent", 10),
        ]);
        let e = |server: u128, c: &str| d.expected(&ServerUuid::from_u128(server), c);
        assert_eq!(
            e(1, "vm-agent"),
            Some(Expected {
                duration: Duration::from_secs(10),
                source: Source::Own
            })
        );
        assert_eq!(
            e(4, "vm-agent"),
            Some(Expected {
                duration: Duration::from_secs(40),
                source: Source::Scaled
            })
        );
        assert_eq!(
            e(9, "vm-agent"),
            Some(Expected {
                duration: Duration::from_secs(20),
                source: Source::Fleet
            })
        );
        assert_eq!(e(1, "cn-agent"), None);
        assert!(Durations::default().is_empty());
    }

    /// An upgrade of what `installed` names to a 2.0.0 image.
    fn upgrade(installed: &crate::reality::Installed) -> crate::Action {
        crate::Action::Upgrade {
            from: installed.into(),
            to: crate::ImageRef {
                uuid: ImageUuid::from_u128(7),
                name: "x".into(),
                version: "2.0.0".into(),
                import_from: None,
            },
        }
    }

    /// A headnode updating sdcadm, dockerlogger and gz-tools through
    /// execute, each recorded at 11 s (its installer gate inside). An
    /// agentsadm that parses `--expect` (0.3.0) gets them in one `gz
    /// install`: one group, and about 11 s expected. A 0.2.0 copy gets one
    /// execute each, which queue on the server's lock: 33 s, where the
    /// plan used to claim they overlap.
    #[test]
    fn execute_steps_share_one_gz_install_where_the_copy_parses_it() {
        let catalog = agentsadm_types::catalog::Catalog::builtin();
        let components = ["dockerlogger", "gz-tools", "sdcadm"];
        let plan = |agentsadm: &str| {
            let mut agents: Vec<serde_json::Value> = components
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    serde_json::json!({"name": c, "version": "1.0.0",
                           "image_uuid": ImageUuid::from_u128(100 + i as u128)})
                })
                .collect();
            agents.push(serde_json::json!({"name": "agentsadm", "version": agentsadm}));
            let server: agentsadm_types::cnapi::Server =
                serde_json::from_value(serde_json::json!({
                    "uuid": "5e000000-0000-4000-8000-000000000000",
                    "hostname": "headnode", "headnode": true,
                    "setup": true, "status": "running", "agents": agents
                }))
                .unwrap();
            let r = crate::reality::Reality::from_servers(&catalog, &[server]);
            let s = r.servers.values().next().unwrap();
            let samples = components.iter().map(|c| Sample {
                server: s.uuid,
                component: (*c).into(),
                elapsed: std::time::Duration::from_secs(11),
                outcome: SampleOutcome::Completed,
            });
            let durations = Durations::from_samples(samples);
            let mut b = crate::PlanBuilder::new(
                crate::Operation::Update,
                &catalog,
                crate::intent::Intent::none(),
            );
            for c in components {
                let action = upgrade(&s.components[c]);
                b.step(
                    s,
                    true,
                    catalog.get(c).unwrap(),
                    action,
                    crate::TransportKind::Execute,
                );
            }
            b.durations(Some(&durations));
            b.finish(&crate::RolloutPolicy::default())
        };
        let finish = |p: &crate::Plan| p.rollout().expected_finish.map(|d| d.as_secs());
        let new = plan("0.3.0");
        let sp = new.servers().values().next().unwrap();
        assert!(
            sp.steps.iter().all(|st| st.gate == Gate::Installer),
            "{new}"
        );
        assert_eq!(sp.execute_groups(), [vec![0, 1, 2]], "{new}");
        assert_eq!(finish(&new), Some(11));
        let old = plan("0.2.0");
        let sp = old.servers().values().next().unwrap();
        assert!(sp.execute_groups().is_empty(), "{old}");
        assert_eq!(sp.steps.len(), 3, "no agentsadm step just to share: {old}");
        assert_eq!(finish(&old), Some(33));
    }

    #[test]
    fn only_the_newest_samples_count() {
        let mut samples: Vec<Sample> = (0..10).map(|_| s(1, "vm-agent", 100)).collect();
        samples.extend((0..SAMPLES_KEPT).map(|_| s(1, "vm-agent", 7)));
        let d = Durations::from_samples(samples);
        assert_eq!(
            d.expected(&ServerUuid::from_u128(1), "vm-agent")
                .unwrap()
                .duration,
            Duration::from_secs(7)
        );
    }
}
