//! Waves: which servers go first (canaries), the order the others start
//! in, how many run at once and how many may fail before no new server
//! starts. Decided here, by the planner, so that the plan the operator
//! confirms shows them and the executor only follows them.
//!
//! - Canaries are never the headnode (issue 22: a bad build must not reach
//!   the datacenter's own services first) and come one per rack first
//!   (servers without a rack count as one rack), then in order. They are
//!   servers with steps: a server whose plan is SAPI writes only proves
//!   nothing about the build.
//! - Without history, everything else starts by hostname (then UUID), the
//!   order the plan lists servers in.
//! - With history ([`Durations`], read before planning), the others start
//!   longest expected first (longest-processing-time order: a long server
//!   started last is what makes a rollout overrun), servers never seen
//!   counting as the typical one; and the canaries are the servers expected
//!   to finish soonest (one per rack first): the canary wave is a barrier
//!   every other server waits on. A server whose newest step of one of its
//!   components failed is passed over as a canary (a server that fails at
//!   once would otherwise look the quickest and halt every rollout); the
//!   plan says why its canaries were chosen ([`CanaryChoice`]). The plan
//!   shows when the rollout should
//!   finish ([`Rollout::expected_finish`]), from the same estimates and the
//!   executor's rules (concurrency, rack limit).
//! - The failure budget is counted on the whole plan's servers.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};

use super::timing::Durations;
use super::types::ServerPlan;
use agentsadm_types::ids::ServerUuid;

/// Servers updated at once unless `--concurrency` says otherwise (RFD 82).
/// sdcadm's 5 leaves a 1000-server rollout four times longer; beyond ~20,
/// the datacenter IMGAPI and CNAPI become the bottleneck.
pub const DEFAULT_CONCURRENCY: usize = 20;

/// `--max-failures N|P%`: how many failed servers a run tolerates before
/// it starts no new server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureBudget {
    Count(usize),
    Percent(u32),
}

impl FailureBudget {
    /// The default: 5% of the servers, at least one.
    pub const DEFAULT: FailureBudget = FailureBudget::Percent(5);

    /// The number of failures tolerated in a run of `servers` servers (at
    /// least one).
    pub fn limit(&self, servers: usize) -> usize {
        match *self {
            FailureBudget::Count(n) => n.max(1),
            FailureBudget::Percent(p) => (servers * p as usize / 100).max(1),
        }
    }
}

impl std::str::FromStr for FailureBudget {
    type Err = String;
    fn from_str(s: &str) -> Result<FailureBudget, String> {
        let bad = || format!("{s:?}: expected a number of servers (7) or a percentage (5%)");
        match s.trim().strip_suffix('%') {
            Some(p) => {
                let p: u32 = p.trim().parse().map_err(|_| bad())?;
                if p > 100 {
                    return Err(bad());
                }
                Ok(FailureBudget::Percent(p))
            }
            None => s
                .trim()
                .parse()
                .map(FailureBudget::Count)
                .map_err(|_| bad()),
        }
    }
}

impl std::fmt::Display for FailureBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureBudget::Count(n) => write!(f, "{n}"),
            FailureBudget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for FailureBudget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The canary wave rule when `--canary` is not given: one canary when the
/// plan changes more than 20 servers, none otherwise.
pub fn default_canary(servers: usize) -> usize {
    usize::from(servers > DEFAULT_CONCURRENCY)
}

/// Pick `n` canaries from servers in run order: one per rack first (racks
/// in order of their first server; servers without a rack count as one
/// rack), then the next servers in order. Returns positions in `racks`.
pub fn pick_canaries(racks: &[Option<&str>], n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<Option<&str>> = BTreeSet::new();
    for (i, r) in racks.iter().enumerate() {
        if out.len() == n {
            return out;
        }
        if seen.insert(*r) {
            out.push(i);
        }
    }
    for i in 0..racks.len() {
        if out.len() == n {
            break;
        }
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out.sort_unstable();
    out
}

/// What the operator asked of the rollout (`-j`, `--canary`,
/// `--max-failures`, `--max-per-rack`); the planner turns it into waves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutPolicy {
    /// Servers at once (at least one).
    pub concurrency: usize,
    /// Servers of the canary wave; `None`: [`default_canary`] of the plan.
    pub canary: Option<usize>,
    /// `None`: no budget (never halt on failures).
    pub max_failures: Option<FailureBudget>,
    /// At most this many servers of one rack in flight.
    pub max_per_rack: Option<usize>,
}

impl Default for RolloutPolicy {
    /// The library's neutral rollout: 20 at a time, no canary, no budget,
    /// no rack limit. The command line's defaults add a 5% budget and the
    /// automatic canary.
    fn default() -> Self {
        RolloutPolicy {
            concurrency: DEFAULT_CONCURRENCY,
            canary: Some(0),
            max_failures: None,
            max_per_rack: None,
        }
    }
}

/// One server of a wave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WaveServer {
    pub server: ServerUuid,
    pub hostname: String,
    /// How long its steps should take, from history (its own, scaled from
    /// the fleet's, or the typical server's); `None` without history.
    #[serde(
        rename = "expected_s",
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_secs"
    )]
    pub expected: Option<std::time::Duration>,
    /// What its steps usually take by its own history alone (the executor
    /// judges it against the same times, `agentsadm_orchestrate::baseline`);
    /// `None` when it has none.
    #[serde(
        rename = "usual_s",
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_secs"
    )]
    pub usual: Option<std::time::Duration>,
}

/// Durations as fractional seconds (to the millisecond).
fn opt_secs<S: Serializer>(d: &Option<std::time::Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64((d.as_secs_f64() * 1000.0).round() / 1000.0),
        None => s.serialize_none(),
    }
}

/// Servers that start together in order; a canary wave must pass before
/// the next starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Wave {
    pub canary: bool,
    pub servers: Vec<WaveServer>,
}

/// How the plan's servers run: the waves in order, the concurrency, the
/// failure budget and the rack limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rollout {
    /// Servers at once.
    pub concurrency: usize,
    /// Every server of the plan exactly once, in the order they start.
    pub waves: Vec<Wave>,
    /// `--max-failures` as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<FailureBudget>,
    /// What that comes to for this plan: failed servers tolerated; one more
    /// and no new server starts. `None`: no budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<usize>,
    /// At most this many servers of one rack at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_per_rack: Option<usize>,
    /// When the last server should finish, from the start of the first,
    /// by history; `None` without history.
    #[serde(
        rename = "expected_finish_s",
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_secs"
    )]
    pub expected_finish: Option<std::time::Duration>,
    /// Servers of the plan with a history of their own for every step.
    #[serde(skip_serializing_if = "is_zero")]
    pub history_servers: usize,
    /// Why the canary wave holds the servers it does (none without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary_choice: Option<CanaryChoice>,
}

/// Why the canaries are the servers they are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CanaryChoice {
    /// How they were ranked.
    pub basis: CanaryBasis,
    /// Servers passed over because their newest step of a component of
    /// theirs in this plan failed, with that component.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<PassedOver>,
}

/// How canaries were ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CanaryBasis {
    /// The quickest by their completed installs (one per rack first).
    Quickest,
    /// No history: the first by hostname (one per rack first).
    Hostname,
    /// Every candidate failed last time: the quickest (or first) of them
    /// anyway, there being no other server to try the build on.
    OnlyFailed,
}

/// A server not made a canary, and the component whose newest step failed
/// there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PassedOver {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
}

impl CanaryChoice {
    /// The plan's line about it: `chosen as the quickest by their completed
    /// installs; passed over: cn0007 (its last vm-agent step failed)`.
    pub fn describe(&self) -> String {
        let basis = match self.basis {
            CanaryBasis::Quickest => "the quickest by their completed installs",
            CanaryBasis::Hostname => "the first by hostname (no completed installs on record)",
            CanaryBasis::OnlyFailed => {
                "the quickest of servers whose last step failed: every candidate's did"
            }
        };
        let mut out = format!("chosen as {basis}");
        if !self.passed_over.is_empty() && self.basis != CanaryBasis::OnlyFailed {
            let names: Vec<String> = self
                .passed_over
                .iter()
                .map(|p| format!("{} (its last {} step failed)", p.hostname, p.component))
                .collect();
            out.push_str(&format!("; passed over: {}", names.join(", ")));
        }
        out
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Rollout {
    /// The servers in the order they start.
    pub fn order(&self) -> impl Iterator<Item = &WaveServer> {
        self.waves.iter().flat_map(|w| &w.servers)
    }

    /// The canary wave's servers (empty without one).
    pub fn canaries(&self) -> &[WaveServer] {
        match self.waves.first() {
            Some(w) if w.canary => &w.servers,
            _ => &[],
        }
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.waves.iter().map(|w| w.servers.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The waves of `servers` under `policy` (pure), ordered by `durations`
/// when there is history.
pub(crate) fn waves(
    servers: &BTreeMap<ServerUuid, ServerPlan>,
    policy: &RolloutPolicy,
    durations: Option<&Durations>,
) -> Rollout {
    let mut order: Vec<(&ServerUuid, &ServerPlan)> = servers.iter().collect();
    order.sort_by(|a, b| a.1.hostname.cmp(&b.1.hostname).then_with(|| a.0.cmp(b.0)));
    let estimates = Estimates::new(&order, durations);
    let wanted = policy
        .canary
        .unwrap_or_else(|| default_canary(servers.len()));
    // Candidates: servers with steps, never the headnode, in run order
    // (with history: the quickest first), not those whose last step of one
    // of their components failed (unless every candidate's did).
    let mut candidates: Vec<usize> = (0..order.len())
        .filter(|&i| !order[i].1.headnode && !order[i].1.steps.is_empty())
        .collect();
    if let Some(est) = &estimates.expected {
        candidates.sort_by_key(|&i| (est[i], i));
    }
    let passed_over: Vec<PassedOver> = match durations {
        Some(d) => candidates
            .iter()
            .filter_map(|&i| {
                let (uuid, sp) = order[i];
                let step = sp
                    .steps
                    .iter()
                    .find(|st| d.failed_last(uuid, st.component.as_str()))?;
                Some(PassedOver {
                    server: *uuid,
                    hostname: sp.hostname.clone(),
                    component: step.component.to_string(),
                })
            })
            .collect(),
        None => Vec::new(),
    };
    let basis = if !passed_over.is_empty() && passed_over.len() == candidates.len() {
        CanaryBasis::OnlyFailed
    } else {
        candidates.retain(|&i| !passed_over.iter().any(|p| p.server == *order[i].0));
        match estimates.expected {
            Some(_) => CanaryBasis::Quickest,
            None => CanaryBasis::Hostname,
        }
    };
    let racks: Vec<Option<&str>> = candidates
        .iter()
        .map(|&i| order[i].1.rack.as_deref())
        .collect();
    let picked: BTreeSet<usize> = pick_canaries(&racks, wanted.min(candidates.len()))
        .into_iter()
        .map(|p| candidates[p])
        .collect();
    let server = |i: usize| WaveServer {
        server: *order[i].0,
        hostname: order[i].1.hostname.clone(),
        expected: estimates.expected.as_ref().map(|e| e[i]),
        usual: estimates.usual[i],
    };
    let mut waves = Vec::new();
    if !picked.is_empty() {
        waves.push(Wave {
            canary: true,
            servers: picked.iter().map(|&i| server(i)).collect(),
        });
    }
    let mut rest: Vec<usize> = (0..order.len()).filter(|i| !picked.contains(i)).collect();
    if let Some(est) = &estimates.expected {
        // Longest first; ties keep the plan's order.
        rest.sort_by_key(|&i| (std::cmp::Reverse(est[i]), i));
    }
    if !rest.is_empty() {
        waves.push(Wave {
            canary: false,
            servers: rest.into_iter().map(server).collect(),
        });
    }
    let mut rollout = Rollout {
        concurrency: policy.concurrency.max(1),
        waves,
        max_failures: policy.max_failures,
        budget: policy.max_failures.map(|b| b.limit(servers.len())),
        max_per_rack: policy.max_per_rack.map(|n| n.max(1)),
        expected_finish: None,
        history_servers: estimates.usual.iter().filter(|u| u.is_some()).count(),
        canary_choice: (!picked.is_empty()).then_some(CanaryChoice { basis, passed_over }),
    };
    if estimates.expected.is_some() {
        rollout.expected_finish = Some(expected_finish(&rollout, servers));
    }
    rollout
}

/// Each server's estimate, in the plan's order.
struct Estimates {
    /// Every server's expected duration (servers without an estimate count
    /// as the median of the others); `None` without history.
    expected: Option<Vec<std::time::Duration>>,
    /// The estimates that are the server's own history.
    usual: Vec<Option<std::time::Duration>>,
}

impl Estimates {
    fn new(order: &[(&ServerUuid, &ServerPlan)], durations: Option<&Durations>) -> Estimates {
        let Some(d) = durations.filter(|d| !d.is_empty()) else {
            return Estimates {
                expected: None,
                usual: vec![None; order.len()],
            };
        };
        let found: Vec<Option<(std::time::Duration, bool)>> = order
            .iter()
            .map(|(u, sp)| match sp.steps.is_empty() {
                // SAPI writes only: nothing on the server to wait for.
                true => Some((std::time::Duration::ZERO, false)),
                false => d.server_expected(u, sp),
            })
            .collect();
        let mut known: Vec<std::time::Duration> = order
            .iter()
            .zip(&found)
            .filter(|(s, _)| !s.1.steps.is_empty())
            .filter_map(|(_, f)| f.map(|(e, _)| e))
            .collect();
        known.sort();
        let typical = known.get(known.len() / 2).copied().unwrap_or_default();
        let usual = found
            .iter()
            .map(|f| f.filter(|(_, own)| *own).map(|(e, _)| e))
            .collect();
        Estimates {
            expected: (!known.is_empty()).then(|| {
                found
                    .iter()
                    .map(|f| f.map_or(typical, |(e, _)| e))
                    .collect()
            }),
            usual,
        }
    }
}

/// When the rollout's last server should finish, from the start: the
/// canary wave, then the other servers as the executor starts them (the
/// next in order whose rack has room, on the first free slot), each
/// taking its estimate.
fn expected_finish(
    rollout: &Rollout,
    servers: &BTreeMap<ServerUuid, ServerPlan>,
) -> std::time::Duration {
    let job = |w: &WaveServer| {
        let rack = servers.get(&w.server).and_then(|sp| sp.rack.as_deref());
        (w.expected.unwrap_or_default(), rack)
    };
    let width = rollout.concurrency.max(1);
    let per_rack = rollout.max_per_rack.unwrap_or(usize::MAX);
    let mut now = std::time::Duration::ZERO;
    for wave in &rollout.waves {
        let jobs: Vec<_> = wave.servers.iter().map(job).collect();
        now = list_schedule(now, &jobs, width, per_rack);
    }
    now
}

/// Greedy list scheduling from `start`, `width` at once and at most
/// `per_rack` of one rack: returns when the last job ends.
fn list_schedule(
    start: std::time::Duration,
    jobs: &[(std::time::Duration, Option<&str>)],
    width: usize,
    per_rack: usize,
) -> std::time::Duration {
    let mut waiting: std::collections::VecDeque<usize> = (0..jobs.len()).collect();
    let mut running: Vec<(std::time::Duration, Option<&str>)> = Vec::new();
    let mut in_rack: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut now, mut end) = (start, start);
    loop {
        while running.len() < width {
            let room =
                |r: Option<&str>| r.is_none_or(|r| in_rack.get(r).copied().unwrap_or(0) < per_rack);
            let Some(pos) = waiting.iter().position(|&j| room(jobs[j].1)) else {
                break;
            };
            let (d, rack) = jobs[waiting.remove(pos).unwrap_or_default()];
            if let Some(r) = rack {
                *in_rack.entry(r).or_default() += 1;
            }
            running.push((now + d, rack));
            end = end.max(now + d);
        }
        let Some((i, _)) = running.iter().enumerate().min_by_key(|(_, r)| r.0) else {
            return end;
        };
        let (t, rack) = running.swap_remove(i);
        now = t;
        if let Some(r) = rack
            && let Some(n) = in_rack.get_mut(r)
        {
            *n = n.saturating_sub(1);
        }
    }
}
