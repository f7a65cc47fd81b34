//! The scheduling half of `agentsadm bench rollout`: the same seeded fleet
//! rolled out twice, first with no history, then with the first run's
//! history, to measure what starting the servers expected to take longest
//! first buys (issue 24).
//!
//! The latency model (scaled down 1000x, as the realistic run's): real
//! fleets have servers that are slow every time (older hardware, busy
//! pools, far racks), so an install on server `i` takes
//!
//! `20 ms x speed_i x noise`
//!
//! - `speed_i`, the server's persistent speed factor: log-normal with
//!   median 1 and sigma 0.8 (a quarter of the servers at least 1.7x the
//!   median, one in twenty at least 3.7x), and 1% of the servers four
//!   times slower again (the old hardware); drawn once per fleet (seed 24);
//! - `noise`, per install: log-normal with median 1 and sigma 0.3 (one in
//!   twenty installs 1.6x its server's usual), drawn afresh for each run.
//!
//! Together: median about 20 ms and p99 about 2.3 min scaled, close to the
//! realistic run's fresh draws (median 20 s, p99 3 min), but most of the
//! spread is the server's own and repeats. Each run is measured against
//! the same bound as the realistic run, for its own latencies:
//! `max(sum / 20, longest) + the canary wave` (the canary's install), 20
//! wide, one canary; and the second run's plan's expected finish against
//! the wall time it took.

use serde::Serialize;

use super::rollout::{list_schedule, plan_vm_agent_update, round3, run_timed};
use agentsadm_orchestrate::history::{HistoryEntry, durations_of, entry};
use agentsadm_plan::Plan;
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_types::ids::ServerUuid;

const CONCURRENCY: usize = 20;
/// The median install, scaled (20 s in a real fleet).
const MEDIAN_MS: f64 = 20.0;
const SPEED_SIGMA: f64 = 0.8;
const NOISE_SIGMA: f64 = 0.3;
/// Share of the servers that are old hardware, and how much slower.
const OLD_SHARE: f64 = 0.01;
const OLD_FACTOR: f64 = 4.0;

/// One of the two runs.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryRun {
    pub wall_s: f64,
    /// `max(sum / 20, longest) + the canary wave`, of this run's latencies.
    pub bound_s: f64,
    /// What the plan expected (the second run: from the first's history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_finish_s: Option<f64>,
    pub canary_s: f64,
    /// What a zero-overhead executor takes on this run's latencies in the
    /// plan's order: the canary wave, then greedy list scheduling 20 wide
    /// (`wall_s` over it is the executor's own overhead).
    pub list_scheduled_s: f64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Both runs and their ratios.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryResult {
    pub servers: usize,
    pub concurrency: usize,
    pub no_history: HistoryRun,
    pub with_history: HistoryRun,
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut rand::rngs::SmallRng) -> f64 {
    use rand::Rng;
    let u1: f64 = 1.0 - rng.r#gen::<f64>();
    let u2: f64 = rng.r#gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Each server's persistent speed factor, by position in the fleet.
pub fn speed_factors(n: usize) -> Vec<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(24);
    (0..n)
        .map(|_| {
            let mut f = (SPEED_SIGMA * normal(&mut rng)).exp();
            if rng.r#gen::<f64>() < OLD_SHARE {
                f *= OLD_FACTOR;
            }
            f
        })
        .collect()
}

/// One run's install latencies in milliseconds: speed x fresh noise.
pub fn latencies_ms(speeds: &[f64], run: u64) -> Vec<f64> {
    use rand::SeedableRng;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(2400 + run);
    speeds
        .iter()
        .map(|s| (MEDIAN_MS * s * (NOISE_SIGMA * normal(&mut rng)).exp()).max(1.0))
        .collect()
}

/// A fresh fleet of `servers` (the same UUIDs every time) with vm-agent
/// 2.0.0 published.
fn fleet(servers: usize) -> (FakeDc, agentsadm_plan::ImageRef) {
    let mut dc = ExampleDc::new(servers.saturating_sub(1));
    let target = dc.publish("vm-agent", "2.0.0");
    (FakeDc::new(dc), target)
}

/// Execute `plan` on `fake` with `latencies` (ms, by server position in
/// `order`); the report's history entry and the run's figures.
async fn execute(
    fake: &FakeDc,
    plan: &Plan,
    order: &[ServerUuid],
    latencies: &[f64],
) -> anyhow::Result<(HistoryEntry, HistoryRun)> {
    let slow = order.iter().copied().zip(latencies.iter().copied());
    let (report, wall) = run_timed(fake, plan, slow, "history").await?;
    let mut e = HistoryEntry {
        plan: entry::plan_record(plan),
        ..HistoryEntry::default()
    };
    entry::finish_from_report(&mut e, plan, &report);
    let secs: Vec<f64> = latencies.iter().map(|ms| ms / 1000.0).collect();
    let sum: f64 = secs.iter().sum();
    let longest = secs.iter().copied().fold(0.0, f64::max);
    let canary = plan
        .rollout()
        .canaries()
        .first()
        .and_then(|c| order.iter().position(|u| *u == c.server))
        .map_or(0.0, |i| secs[i]);
    let at = |u: &ServerUuid| order.iter().position(|o| o == u).map_or(0.0, |i| secs[i]);
    let canary_wave = plan
        .rollout()
        .canaries()
        .iter()
        .map(|c| at(&c.server))
        .fold(0.0, f64::max);
    let rest: Vec<f64> = plan
        .rollout()
        .waves
        .iter()
        .filter(|w| !w.canary)
        .flat_map(|w| w.servers.iter().map(|s| at(&s.server)))
        .collect();
    let list_scheduled = canary_wave + list_schedule(&rest, CONCURRENCY);
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
    let run = HistoryRun {
        wall_s: round3(wall),
        bound_s: round3((sum / CONCURRENCY as f64).max(longest) + canary),
        expected_finish_s: plan
            .rollout()
            .expected_finish
            .map(|d| round3(d.as_secs_f64())),
        canary_s: round3(canary),
        list_scheduled_s: round3(list_scheduled),
        median_ms: round3(pct(0.5)),
        p99_ms: round3(pct(0.99)),
        max_ms: round3(longest * 1000.0),
    };
    Ok((e, run))
}

/// Both runs on a fleet of `servers`.
pub async fn measure(servers: usize) -> anyhow::Result<HistoryResult> {
    let speeds = speed_factors(servers);
    // Server positions: the fleet's servers in UUID order, the same in
    // both runs (and both fleets).
    let (first, target) = fleet(servers);
    let order: Vec<ServerUuid> = first.dc().reality().servers.keys().copied().collect();
    let plan1 = plan_vm_agent_update(&first, &target, servers, CONCURRENCY, None)?;
    let (entry1, run1) = execute(&first, &plan1, &order, &latencies_ms(&speeds, 1)).await?;
    let durations = durations_of(&[entry1]);
    let (second, target) = fleet(servers);
    let plan2 = plan_vm_agent_update(&second, &target, servers, CONCURRENCY, Some(&durations))?;
    let (_, run2) = execute(&second, &plan2, &order, &latencies_ms(&speeds, 2)).await?;
    Ok(HistoryResult {
        servers,
        concurrency: CONCURRENCY,
        no_history: run1,
        with_history: run2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_seeded_and_its_spread_is_mostly_the_servers_own() {
        let speeds = speed_factors(2000);
        assert_eq!(speeds, speed_factors(2000));
        let (a, b) = (latencies_ms(&speeds, 1), latencies_ms(&speeds, 2));
        assert_ne!(a, b);
        let mut sorted = a.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[1000];
        assert!((15.0..27.0).contains(&median), "{median}");
        // The same server's two installs correlate strongly.
        let la: Vec<f64> = a.iter().map(|x| x.ln()).collect();
        let lb: Vec<f64> = b.iter().map(|x| x.ln()).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (ma, mb) = (mean(&la), mean(&lb));
        let cov: f64 = la.iter().zip(&lb).map(|(x, y)| (x - ma) * (y - mb)).sum();
        let va: f64 = la.iter().map(|x| (x - ma).powi(2)).sum();
        let vb: f64 = lb.iter().map(|y| (y - mb).powi(2)).sum();
        let r = cov / (va * vb).sqrt();
        assert!(r > 0.8, "correlation {r}");
    }
}
