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
//! - Everything else starts by hostname (then UUID), the order the plan
//!   lists servers in.
//! - The failure budget is counted on the whole plan's servers.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};

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

/// The waves of `servers` under `policy` (pure).
pub(crate) fn waves(servers: &BTreeMap<ServerUuid, ServerPlan>, policy: &RolloutPolicy) -> Rollout {
    let mut order: Vec<(&ServerUuid, &ServerPlan)> = servers.iter().collect();
    order.sort_by(|a, b| a.1.hostname.cmp(&b.1.hostname).then_with(|| a.0.cmp(b.0)));
    let wanted = policy
        .canary
        .unwrap_or_else(|| default_canary(servers.len()));
    // Candidates: servers with steps, never the headnode, in run order.
    let candidates: Vec<usize> = (0..order.len())
        .filter(|&i| !order[i].1.headnode && !order[i].1.steps.is_empty())
        .collect();
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
    };
    let mut waves = Vec::new();
    if !picked.is_empty() {
        waves.push(Wave {
            canary: true,
            servers: picked.iter().map(|&i| server(i)).collect(),
        });
    }
    let rest: Vec<WaveServer> = (0..order.len())
        .filter(|i| !picked.contains(i))
        .map(server)
        .collect();
    if !rest.is_empty() {
        waves.push(Wave {
            canary: false,
            servers: rest,
        });
    }
    Rollout {
        concurrency: policy.concurrency.max(1),
        waves,
        max_failures: policy.max_failures,
        budget: policy.max_failures.map(|b| b.limit(servers.len())),
        max_per_rack: policy.max_per_rack.map(|n| n.max(1)),
    }
}
