//! Outliers and stragglers: pure decisions over elapsed times, so they are
//! tested without a clock (the executor feeds them tokio time).
//!
//! - Once at least [`OutlierPolicy::min_finished`] servers have finished, a
//!   running server whose elapsed time exceeds
//!   `max(factor x median, median + margin)` is an outlier; each gets one
//!   warning. The margin keeps fast rollouts (median of seconds) from
//!   flagging ordinary jitter.
//! - A server with a history of its own (the plan's
//!   [`agentsadm_plan::WaveServer::usual`]: what its steps usually take)
//!   is judged against itself instead, from the start and however few
//!   servers have finished: past `max(factor x usual, usual + margin)` it
//!   is an outlier ("cn0042 usually takes 40s and is at 3m00s"). A server
//!   that is slow every time is no news; one slower than itself is.
//! - Stragglers: when nothing is left to start and every server still
//!   running is an outlier, the straggler clock starts; after
//!   `--straggler-timeout` the executor stops waiting for them.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use agentsadm_types::ids::ServerUuid;

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

/// One outlier warning: against the servers finished so far (`median`)
/// or against the server's own history (`usual`); exactly one is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outlier {
    pub server: ServerUuid,
    pub hostname: String,
    #[serde(with = "duration_secs")]
    pub elapsed: Duration,
    /// The median of the servers finished when it was flagged.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub median: Option<Duration>,
    /// What its steps usually take, by its own history.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub usual: Option<Duration>,
}

impl Outlier {
    /// What it is measured against: (`usual` or the median, `true` when
    /// it is its own history).
    pub fn yardstick(&self) -> (Duration, bool) {
        match (self.usual, self.median) {
            (Some(u), _) => (u, true),
            (None, m) => (m.unwrap_or_default(), false),
        }
    }

    /// Why it is flagged, after its name: `usually takes 40.0s and is at
    /// 3m00s`, or `running for 3m00s, the median server took 40.0s`.
    pub fn describe(&self) -> String {
        use super::report::fmt_duration;
        match self.yardstick() {
            (usual, true) => format!(
                "usually takes {} and is at {}",
                fmt_duration(usual),
                fmt_duration(self.elapsed)
            ),
            (median, false) => format!(
                "running for {}, the median server took {}",
                fmt_duration(self.elapsed),
                fmt_duration(median)
            ),
        }
    }
}

/// Serialize optional durations as fractional seconds.
pub mod opt_duration_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration_secs::serialize(d, s),
            None => s.serialize_none(),
        }
    }
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

/// The elapsed time above which a server that usually takes `usual` is an
/// outlier against its own history.
pub fn own_threshold(policy: &OutlierPolicy, usual: Duration) -> Duration {
    usual
        .mul_f64(policy.factor.max(1.0))
        .max(usual + policy.margin)
}

/// One running server: its UUID, hostname, elapsed time and what it
/// usually takes by its own history (if it has one).
pub type Running<'a> = (ServerUuid, &'a str, Duration, Option<Duration>);

/// Running servers that just became outliers (not warned about before):
/// those with a history of their own against it, the others against the
/// median of `finished`.
pub fn new_outliers<'a>(
    policy: &OutlierPolicy,
    finished: &[Duration],
    running: impl IntoIterator<Item = Running<'a>>,
    warned: &BTreeSet<ServerUuid>,
) -> Vec<Outlier> {
    let fleet = threshold(policy, finished);
    let mut out: Vec<Outlier> = running
        .into_iter()
        .filter(|(server, ..)| !warned.contains(server))
        .filter_map(|(server, hostname, elapsed, usual)| {
            let (median, usual) = match usual {
                Some(u) if elapsed > own_threshold(policy, u) => (None, Some(u)),
                Some(_) => return None,
                None => match fleet {
                    Some((limit, median)) if elapsed > limit => (Some(median), None),
                    _ => return None,
                },
            };
            Some(Outlier {
                server,
                hostname: hostname.to_string(),
                elapsed,
                median,
                usual,
            })
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
        let running = [(server(1), "cn1", Duration::from_secs(1000), None)];
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
            (server(2), "cn2", Duration::from_secs(41), None),
            (server(1), "cn1", Duration::from_secs(39), None),
            (server(3), "cn3", Duration::from_secs(100), None),
        ];
        let first = new_outliers(&p, &finished, running.clone(), &BTreeSet::new());
        assert_eq!(
            first
                .iter()
                .map(|o| o.hostname.as_str())
                .collect::<Vec<_>>(),
            ["cn2", "cn3"]
        );
        assert_eq!(first[0].median, Some(Duration::from_secs(10)));
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

    #[test]
    fn a_server_with_history_is_judged_against_itself() {
        let p = OutlierPolicy::default();
        let secs = Duration::from_secs;
        // Nothing finished yet: cn0042 usually takes 40 s and is at 3 min;
        // cn7 usually takes 5 min (slow every time) and is at 4 min; cn9
        // has no history and no median to compare with.
        let running = vec![
            (server(42), "cn0042", secs(180), Some(secs(40))),
            (server(7), "cn7", secs(240), Some(secs(300))),
            (server(9), "cn9", secs(240), None),
        ];
        let flagged = new_outliers(&p, &[], running.clone(), &BTreeSet::new());
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(flagged[0].hostname, "cn0042");
        assert_eq!(flagged[0].usual, Some(secs(40)));
        assert_eq!(flagged[0].median, None);
        assert_eq!(flagged[0].describe(), "usually takes 40.0s and is at 3m00s");
        // With a fleet median of 10 s, cn7 is still itself (no warning);
        // cn9 is judged against the fleet.
        let flagged = new_outliers(&p, &secs_list(&[10; 5]), running, &BTreeSet::new());
        let names: Vec<&str> = flagged.iter().map(|o| o.hostname.as_str()).collect();
        assert_eq!(names, ["cn9", "cn0042"]);
        let json = serde_json::to_value(&flagged[0]).unwrap();
        assert!(json.get("median").is_none() || json.get("usual").is_none());
    }

    fn secs_list(v: &[u64]) -> Vec<Duration> {
        secs(v)
    }
}
