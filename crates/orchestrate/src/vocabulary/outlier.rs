//! Outliers and stragglers: pure decisions over elapsed times, so they are
//! tested without a clock (the executor feeds them tokio time).
//!
//! - Once at least [`OutlierPolicy::min_finished`] servers have finished, a
//!   running server whose elapsed time exceeds
//!   `max(factor x median, median + margin)` is an outlier; each gets one
//!   warning. The margin keeps fast rollouts (median of seconds) from
//!   flagging ordinary jitter.
//! - A server with a history of its own is judged against itself instead,
//!   from the start and however few servers have finished
//!   ([`crate::baseline::outliers`]): "cn0042 usually takes 40.0s and is at
//!   3m00s".
//! - Stragglers: when nothing is left to start and every server still
//!   running is an outlier, the straggler clock starts; after
//!   `--straggler-timeout` the executor stops waiting for them.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use agentsadm_types::ids::ServerUuid;

/// What a slow server was compared with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutlierBasis {
    /// The median of the servers that finished in this run.
    #[default]
    Median,
    /// The catalog's expected install times.
    Catalog,
    /// The server's own times in earlier runs.
    History,
}

/// When a running server counts as an outlier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutlierPolicy {
    /// `--outlier-factor` (default 3).
    pub factor: f64,
    /// Added to the median as the minimum threshold (default 30 s).
    pub margin: Duration,
    /// Finished servers needed before any warning (default 5).
    pub min_finished: usize,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        OutlierPolicy {
            factor: 3.0,
            margin: Duration::from_secs(30),
            min_finished: 5,
        }
    }
}

/// One outlier warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outlier {
    pub server: ServerUuid,
    pub hostname: String,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    /// What it was compared with: the median of the servers that
    /// finished, or (before there is one) its expected time, see `basis`.
    #[serde(with = "duration_secs")]
    pub median: Duration,
    /// What `median` is ([`crate::baseline`]).
    pub basis: OutlierBasis,
}

/// Serialize durations as fractional seconds.
pub mod duration_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64((d.as_secs_f64() * 1000.0).round() / 1000.0)
    }
}

/// The median of some durations (the upper median for an even count).
pub fn median(durations: &[Duration]) -> Option<Duration> {
    percentile(durations, 50.0)
}

/// Nearest-rank percentile (`p` in 0..=100) of unsorted durations.
pub fn percentile(durations: &[Duration], p: f64) -> Option<Duration> {
    if durations.is_empty() {
        return None;
    }
    let mut sorted = durations.to_vec();
    sorted.sort();
    Some(percentile_sorted(&sorted, p))
}

/// Nearest-rank percentile of sorted, non-empty durations.
pub fn percentile_sorted(sorted: &[Duration], p: f64) -> Duration {
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// The elapsed time above which a running server is an outlier, or `None`
/// while too few servers have finished.
pub fn threshold(policy: &OutlierPolicy, finished: &[Duration]) -> Option<(Duration, Duration)> {
    if finished.len() < policy.min_finished.max(1) {
        return None;
    }
    let m = median(finished)?;
    let by_factor = m.mul_f64(policy.factor.max(1.0));
    Some((by_factor.max(m + policy.margin), m))
}

/// Running servers that just became outliers (not warned about before).
pub fn new_outliers<'a>(
    policy: &OutlierPolicy,
    finished: &[Duration],
    running: impl IntoIterator<Item = (ServerUuid, &'a str, Duration)>,
    warned: &BTreeSet<ServerUuid>,
) -> Vec<Outlier> {
    let Some((limit, median)) = threshold(policy, finished) else {
        return Vec::new();
    };
    let mut out: Vec<Outlier> = running
        .into_iter()
        .filter(|(server, _, elapsed)| *elapsed > limit && !warned.contains(server))
        .map(|(server, hostname, elapsed)| Outlier {
            server,
            hostname: hostname.to_string(),
            elapsed,
            median,
            basis: OutlierBasis::Median,
        })
        .collect();
    out.sort_by_key(|a| a.server);
    out
}

/// Whether only stragglers remain: nothing queued, something running, and
/// every running server already flagged as an outlier.
pub fn only_stragglers_left(
    queued: usize,
    running: &[ServerUuid],
    outliers: &BTreeSet<ServerUuid>,
) -> bool {
    queued == 0 && !running.is_empty() && running.iter().all(|s| outliers.contains(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|s| Duration::from_secs(*s)).collect()
    }

    fn server(n: u128) -> ServerUuid {
        ServerUuid::from_u128(n)
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let d = secs(&[5, 1, 4, 2, 3]);
        assert_eq!(median(&d), Some(Duration::from_secs(3)));
        assert_eq!(percentile(&d, 90.0), Some(Duration::from_secs(5)));
        assert_eq!(percentile(&d, 0.0), Some(Duration::from_secs(1)));
        assert_eq!(
            percentile(&secs(&[1, 2, 3, 4]), 50.0),
            Some(Duration::from_secs(2))
        );
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn no_warning_before_five_finished() {
        let p = OutlierPolicy::default();
        let running = [(server(1), "cn1", Duration::from_secs(1000))];
        assert!(new_outliers(&p, &secs(&[10, 10, 10, 10]), running, &BTreeSet::new()).is_empty());
        assert_eq!(
            new_outliers(&p, &secs(&[10; 5]), running, &BTreeSet::new()).len(),
            1
        );
    }

    #[test]
    fn threshold_is_the_larger_of_factor_and_margin() {
        let p = OutlierPolicy::default();
        // Median 10 s: 3x = 30 s, +30 s = 40 s -> 40 s.
        assert_eq!(
            threshold(&p, &secs(&[10; 5])).unwrap().0,
            Duration::from_secs(40)
        );
        // Median 100 s: 3x = 300 s wins.
        assert_eq!(
            threshold(&p, &secs(&[100; 5])).unwrap().0,
            Duration::from_secs(300)
        );
        let p2 = OutlierPolicy { factor: 5.0, ..p };
        assert_eq!(
            threshold(&p2, &secs(&[100; 5])).unwrap().0,
            Duration::from_secs(500)
        );
    }

    #[test]
    fn each_outlier_is_warned_once_and_named_with_the_median() {
        let p = OutlierPolicy::default();
        let finished = secs(&[10; 6]);
        let running = vec![
            (server(2), "cn2", Duration::from_secs(41)),
            (server(1), "cn1", Duration::from_secs(39)),
            (server(3), "cn3", Duration::from_secs(100)),
        ];
        let first = new_outliers(&p, &finished, running.clone(), &BTreeSet::new());
        assert_eq!(
            first
                .iter()
                .map(|o| o.hostname.as_str())
                .collect::<Vec<_>>(),
            ["cn2", "cn3"]
        );
        assert_eq!(first[0].median, Duration::from_secs(10));
        let warned: BTreeSet<_> = first.iter().map(|o| o.server).collect();
        assert!(new_outliers(&p, &finished, running, &warned).is_empty());
    }

    #[test]
    fn stragglers_only_when_every_running_server_is_an_outlier() {
        let outliers: BTreeSet<_> = [server(1)].into();
        assert!(only_stragglers_left(0, &[server(1)], &outliers));
        assert!(!only_stragglers_left(1, &[server(1)], &outliers));
        assert!(!only_stragglers_left(0, &[server(1), server(2)], &outliers));
        assert!(!only_stragglers_left(0, &[], &outliers));
    }
}
