//! The one retry policy of agentsadm's network work: the API clients'
//! idempotent calls, the start of an image file download, and whole image
//! downloads that broke off or failed verification.
//!
//! Delays grow exponentially from a first delay, doubling each retry, with
//! jitter (each delay grows by up to its own length again, at random) so
//! that twenty workers retrying one overloaded service do not come back in
//! lockstep, and never exceed [`MAX_DELAY`]. What is worth retrying, and
//! how many times, stays with the caller. The schedule and the loop are
//! backon's; this module only fixes the policy.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};

/// No retry waits longer than this, however many attempts came before.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// How many times to retry and how long to wait first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first (0: the first failure is final).
    pub retries: u32,
    /// The delay before the first retry; each later one doubles.
    pub first_delay: Duration,
}

impl RetryPolicy {
    pub fn new(retries: u32, first_delay: Duration) -> RetryPolicy {
        RetryPolicy {
            retries,
            first_delay,
        }
    }

    /// The delays before each retry, in order (`retries` of them).
    pub fn delays(self) -> Delays {
        // backon caps the delay before adding the jitter, so the growth stops
        // at half the cap: jittered delays then stay below MAX_DELAY and still
        // spread out once the growth has stopped.
        let schedule = ExponentialBuilder::new()
            .with_min_delay(self.first_delay)
            .with_factor(2.0)
            .with_max_delay(MAX_DELAY / 2)
            .with_max_times(self.retries as usize)
            .with_jitter()
            .build();
        Delays { schedule }
    }

    /// Run `attempt` until it succeeds, fails with an error `retryable`
    /// refuses, or the retries are spent, and return its last result.
    /// `on_retry` hears each failure that will be retried and the delay
    /// before the next attempt (for logs).
    pub async fn run<T, E, Fut>(
        self,
        attempt: impl FnMut() -> Fut,
        retryable: impl FnMut(&E) -> bool,
        on_retry: impl FnMut(&E, Duration),
    ) -> Result<T, E>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        attempt
            .retry(self)
            .sleep(tokio::time::sleep)
            .when(retryable)
            .notify(on_retry)
            .await
    }
}

impl BackoffBuilder for RetryPolicy {
    type Backoff = Delays;

    fn build(self) -> Delays {
        self.delays()
    }
}

/// The delays of one [`RetryPolicy`], each at most [`MAX_DELAY`].
#[derive(Debug)]
pub struct Delays {
    schedule: <ExponentialBuilder as BackoffBuilder>::Backoff,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // The cap holds even for a first delay above it.
        self.schedule.next().map(|delay| delay.min(MAX_DELAY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_and_caps() {
        let base = Duration::from_millis(100);
        let delays: Vec<Duration> = RetryPolicy::new(30, base).delays().collect();
        assert_eq!(delays.len(), 30);
        assert!(delays[0] >= base);
        assert!(delays[2] >= Duration::from_millis(400));
        assert!(delays[29] <= Duration::from_secs(10));
        assert!(delays.iter().all(|d| *d <= MAX_DELAY));
        let huge = RetryPolicy::new(1, Duration::from_secs(60));
        assert_eq!(huge.delays().collect::<Vec<_>>(), vec![MAX_DELAY]);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_only_what_the_caller_calls_retryable() {
        let policy = RetryPolicy::new(2, Duration::from_millis(10));
        let attempts = AtomicU32::new(0);
        let mut heard = Vec::new();
        let result: Result<(), &str> = policy
            .run(
                || async {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    Err("busy")
                },
                |e| *e == "busy",
                |e, delay| heard.push((*e, delay)),
            )
            .await;
        assert_eq!(result, Err("busy"));
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            3,
            "one try and two retries"
        );
        assert_eq!(heard.len(), 2);

        attempts.store(0, Ordering::SeqCst);
        let result: Result<(), &str> = policy
            .run(
                || async {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    Err("refused")
                },
                |e| *e == "busy",
                |_, _| {},
            )
            .await;
        assert_eq!(result, Err("refused"));
        assert_eq!(attempts.load(Ordering::SeqCst), 1);

        let never = RetryPolicy::new(0, Duration::from_millis(10));
        attempts.store(0, Ordering::SeqCst);
        let _: Result<(), &str> = never
            .run(
                || async {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    Err("busy")
                },
                |_| true,
                |_, _| {},
            )
            .await;
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }
}
