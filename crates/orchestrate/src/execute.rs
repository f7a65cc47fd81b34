//! The executor: carries out a [`Plan`] across servers.
//!
//! - Service default images are set first; if SAPI refuses, nothing else
//!   happens (exit status 1).
//! - Then servers run [`ExecOptions::concurrency`] at a time (default 20,
//!   the RFD 82 figure; sdcadm used 5), in plan order (by hostname). A
//!   server's turn: its SAPI instance targets, then its steps batch by batch
//!   (core components alone, the parallel-safe set concurrently), then the
//!   SAPI writes that follow installs and removals.
//! - A failing server never stops the others; its remaining steps are not
//!   run and the failure names the component, the stage and the remote
//!   error. Each step is bounded by the task timeout.
//! - Outliers are checked on a tick: one warning per slow server. With a
//!   straggler timeout, once only outliers are left the executor waits that
//!   long more, then stops waiting and reports them as timed out.
//! - Everything runs on the caller's task (no spawning): a small number of
//!   futures waiting on the network, with no per-server setup cost, so the
//!   overhead per server stays far below a millisecond.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use futures::future::{LocalBoxFuture, OptionFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::outlier;

use super::outlier::OutlierPolicy;
use super::report::CanaryResult;
use super::report::ExecEvent;
use super::report::ExecReport;
use super::report::Failure;
use super::report::FailureStage;
use super::report::GateResult;
use super::report::Halted;
use super::report::InFlight;
use super::report::Reporter;
use super::report::Revert;
use super::report::ServerOutcome;
use super::report::ServerStatus;
use super::report::StepResult;
use super::report::StepStatus;
use super::store::IntentStore;
use super::store::IntentWriteError;
use super::transport::StepFailure;
use super::transport::Transport;
use agentsadm_plan::Action;
use agentsadm_plan::Gate;
use agentsadm_plan::ImageRef;
use agentsadm_plan::IntentChange;
use agentsadm_plan::Plan;
use agentsadm_plan::ServerPlan;
use agentsadm_plan::ServiceChange;
use agentsadm_plan::Step;
use agentsadm_plan::TransportKind;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// Servers updated at once unless `--concurrency` says otherwise (RFD 82).
/// sdcadm's 5 leaves a 1000-server rollout four times longer; beyond ~20,
/// the datacenter IMGAPI and CNAPI become the bottleneck.
pub const DEFAULT_CONCURRENCY: usize = 20;

/// Default per-step timeout: sdcadm's 30 minutes of polling.
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Executor settings.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    pub concurrency: usize,
    pub task_timeout: Duration,
    pub outlier: OutlierPolicy,
    /// Stop waiting for outliers this long after they are all that is left.
    pub straggler_timeout: Option<Duration>,
    /// Run parallel-safe components of one server concurrently. Off only to
    /// imitate the shar (one component after the other) in benchmarks.
    pub parallel_within_server: bool,
    /// How often running servers are checked for outliers.
    pub tick: Duration,
    /// Stop starting servers once more than this many have failed
    /// (`--max-failures`); `None`: never stop.
    pub max_failures: Option<FailureBudget>,
    /// At most this many servers of one rack in flight (`--max-per-rack`).
    pub max_per_rack: Option<usize>,
    /// Servers of the first wave (`--canary`): the rest start only once
    /// every canary has succeeded (and the continue callback agreed).
    pub canary: usize,
    /// `--min-healthy` / `--health-timeout` for the servers' health gate
    /// (`None`: the installer's defaults).
    pub health: Option<agentsadm_plan::HealthFlags>,
}

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

/// The canary wave rule when `--canary` is not given: one canary when the
/// plan changes more than 20 servers, none otherwise.
pub fn default_canary(servers: usize) -> usize {
    usize::from(servers > DEFAULT_CONCURRENCY)
}

/// Pick `n` canaries from servers in run order: one per rack first (racks
/// in order of their first server; servers without a rack count as one
/// rack), then the next servers in order. Returns positions in `order`.
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

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            concurrency: DEFAULT_CONCURRENCY,
            task_timeout: DEFAULT_TASK_TIMEOUT,
            outlier: OutlierPolicy::default(),
            straggler_timeout: None,
            parallel_within_server: true,
            tick: Duration::from_secs(1),
            max_failures: None,
            canary: 0,
            max_per_rack: None,
            health: None,
        }
    }
}

/// Execution could not start; nothing was changed on any server.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot set the default image of {component} before executing; no server was touched")]
    ServiceChange {
        component: String,
        #[source]
        err: IntentWriteError,
    },
}

/// What the executor asks while it runs.
pub trait RunGate: Sync {
    /// Whether another process broke the datacenter lock: then no new
    /// server starts.
    fn lock_lost(&self) -> bool {
        false
    }

    /// Every canary succeeded; go on with the `remaining` servers?
    fn canary_passed(&self, canaries: &[String], remaining: usize) -> impl Future<Output = bool>;

    /// The run was interrupted with `in_flight` servers running: keep
    /// waiting for them until the returned future resolves (a second
    /// Ctrl-C), or stop waiting at once (`None`, the default: scripts and
    /// tests).
    fn keep_waiting(&self, _in_flight: &[InFlight]) -> Option<LocalBoxFuture<'_, ()>> {
        None
    }
}

/// Never asks: continues after a passed canary wave (`-y`, tests, benches).
#[derive(Clone, Copy, Debug, Default)]
pub struct Unattended;

impl RunGate for Unattended {
    async fn canary_passed(&self, _canaries: &[String], _remaining: usize) -> bool {
        true
    }
}

fn rack_has_room(in_rack: &BTreeMap<&str, usize>, sp: &ServerPlan, max: usize) -> bool {
    sp.rack
        .as_deref()
        .is_none_or(|r| in_rack.get(r).copied().unwrap_or(0) < max)
}

/// What the executor works with.
#[derive(Clone, Copy)]
pub struct Executor<'a> {
    pub transport: &'a dyn Transport,
    pub store: &'a dyn IntentStore,
    pub reporter: &'a dyn Reporter,
    pub options: &'a ExecOptions,
}

impl<'a> Executor<'a> {
    /// Carry out the plan. `cancel` resolving (Ctrl-C) stops starting
    /// servers and stops waiting for running ones. After a passed canary
    /// wave the run continues without asking.
    pub async fn execute(
        &self,
        plan: &Plan,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecReport, ExecError> {
        self.execute_gated(plan, cancel, &Unattended).await
    }

    /// [`Executor::execute`], asking `gate` whether to go on after the
    /// canary wave and whether the datacenter lock still holds before each
    /// server starts.
    pub async fn execute_gated(
        &self,
        plan: &Plan,
        cancel: impl Future<Output = ()>,
        gate: &impl RunGate,
    ) -> Result<ExecReport, ExecError> {
        let started_at = Instant::now();
        let mut report = ExecReport::default();
        if gate.lock_lost() {
            report.halted = Some(Halted::LockLost);
        }
        for change in &plan.service_changes {
            if report.halted.is_some() {
                break;
            }
            self.store
                .set_service_image(change)
                .await
                .map_err(|err| ExecError::ServiceChange {
                    component: change.component.clone(),
                    err,
                })?;
            report.service_changes += 1;
        }

        self.reporter.event(&ExecEvent::Started {
            servers: plan.servers.len(),
            steps: plan.step_count(),
            concurrency: self.options.concurrency,
        });

        let concurrency = self.options.concurrency.max(1);
        let order = plan.servers_in_order();
        let canary_n = self.options.canary.min(order.len());
        let racks: Vec<Option<&str>> = order.iter().map(|(_, sp)| sp.rack.as_deref()).collect();
        let picks = pick_canaries(&racks, canary_n);
        let mut ordered = Vec::with_capacity(order.len());
        ordered.extend(picks.iter().map(|&i| order[i]));
        let canaries: BTreeSet<ServerUuid> = ordered.iter().map(|(u, _)| **u).collect();
        ordered.extend(
            order
                .iter()
                .filter(|(u, _)| !canaries.contains(*u))
                .copied(),
        );
        let canary_hosts: Vec<String> = ordered[..canary_n]
            .iter()
            .map(|(_, sp)| sp.hostname.clone())
            .collect();
        let budget = self
            .options
            .max_failures
            .map(|b| b.limit(plan.servers.len()));
        report.budget = budget;
        let mut failures = 0usize;
        let mut canary_done = 0usize;
        let mut canary_failed: Vec<String> = Vec::new();
        let mut gate_open = canary_n == 0;
        let mut launched = 0usize;
        let max_per_rack = self.options.max_per_rack.unwrap_or(usize::MAX).max(1);
        let mut in_rack: BTreeMap<&str, usize> = BTreeMap::new();
        let mut held: std::collections::VecDeque<(&ServerUuid, &ServerPlan)> =
            std::collections::VecDeque::new();

        let mut queue = ordered.into_iter();
        let mut running = FuturesUnordered::new();
        let mut started: BTreeMap<ServerUuid, (Instant, &str)> = BTreeMap::new();
        let mut finished: Vec<Duration> = Vec::new();
        let mut warned: BTreeSet<ServerUuid> = BTreeSet::new();
        let mut straggler_since: Option<Instant> = None;
        let mut ticker = tokio::time::interval(self.options.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut queued = plan.servers.len();
        tokio::pin!(cancel);
        // After an interrupt, while waiting for the servers in flight: the
        // second interrupt.
        let mut stop_waiting: Option<LocalBoxFuture<'_, ()>> = None;

        loop {
            while running.len() < concurrency
                && report.halted.is_none()
                && !report.interrupted
                && (gate_open || launched < canary_n)
            {
                if gate.lock_lost() {
                    report.halted = Some(Halted::LockLost);
                    break;
                }
                // The first server in order whose rack has room; servers
                // passed over wait in `held`, in order.
                let pos = held
                    .iter()
                    .position(|(_, sp)| rack_has_room(&in_rack, sp, max_per_rack));
                let next = match pos {
                    Some(i) => held.remove(i),
                    None => loop {
                        let Some(e) = queue.next() else { break None };
                        if rack_has_room(&in_rack, e.1, max_per_rack) {
                            break Some(e);
                        }
                        held.push_back(e);
                    },
                };
                let Some((&uuid, sp)) = next else {
                    break;
                };
                queued -= 1;
                launched += 1;
                if let Some(r) = sp.rack.as_deref() {
                    *in_rack.entry(r).or_default() += 1;
                }
                started.insert(uuid, (Instant::now(), sp.hostname.as_str()));
                running.push(async move { (uuid, self.run_server(uuid, sp).await) });
            }
            if running.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                () = &mut cancel, if !report.interrupted => {
                    report.interrupted = true;
                    let in_flight = self.in_flight(&started);
                    stop_waiting = gate.keep_waiting(&in_flight);
                    self.reporter.event(&ExecEvent::Interrupted {
                        in_flight: &in_flight,
                        waiting: stop_waiting.is_some(),
                    });
                    if stop_waiting.is_none() {
                        break;
                    }
                }
                Some(()) = OptionFuture::from(stop_waiting.as_mut()), if stop_waiting.is_some() => {
                    let in_flight = self.in_flight(&started);
                    self.reporter.event(&ExecEvent::StoppedWaiting { in_flight: &in_flight });
                    break;
                }
                Some((uuid, outcome)) = running.next() => {
                    started.remove(&uuid);
                    if let Some(r) = plan.servers.get(&uuid).and_then(|sp| sp.rack.as_deref())
                        && let Some(n) = in_rack.get_mut(r)
                    {
                        *n = n.saturating_sub(1);
                    }
                    let failed = matches!(outcome.status, ServerStatus::Failed | ServerStatus::TimedOut);
                    if outcome.status == ServerStatus::Succeeded {
                        finished.push(outcome.elapsed);
                    }
                    if failed {
                        failures += 1;
                    }
                    self.reporter.event(&ExecEvent::ServerFinished { server: uuid, outcome: &outcome });
                    let hostname = outcome.hostname.clone();
                    report.servers.insert(uuid, outcome);
                    if !gate_open && canaries.contains(&uuid) {
                        canary_done += 1;
                        if failed {
                            canary_failed.push(hostname);
                        }
                        if canary_done == canary_n {
                            let passed = canary_failed.is_empty();
                            report.canary = Some(CanaryResult { servers: canary_hosts.clone(), passed });
                            if !passed {
                                report.halted = Some(Halted::Canary { failed: std::mem::take(&mut canary_failed) });
                            } else if queued == 0 || gate.canary_passed(&canary_hosts, queued).await {
                                gate_open = true;
                            } else {
                                report.halted = Some(Halted::Declined);
                            }
                        }
                    }
                    if let Some(b) = budget
                        && failures > b
                        && report.halted.is_none()
                    {
                        report.halted = Some(Halted::Budget { failures, budget: b });
                    }
                }
                _ = ticker.tick() => {
                    let now = Instant::now();
                    let fresh = outlier::new_outliers(
                        &self.options.outlier,
                        &finished,
                        started.iter().map(|(u, (t, h))| (*u, *h, now - *t)),
                        &warned,
                    );
                    for o in fresh {
                        warned.insert(o.server);
                        self.reporter.event(&ExecEvent::Outlier(&o));
                        report.outliers.push(o);
                    }
                    let Some(limit) = self.options.straggler_timeout else { continue };
                    let running_now: Vec<ServerUuid> = started.keys().copied().collect();
                    let waiting = if report.halted.is_some() { 0 } else { queued };
                    if outlier::only_stragglers_left(waiting, &running_now, &warned) {
                        let since = *straggler_since.get_or_insert(now);
                        if now - since >= limit {
                            let abandoned: Vec<(ServerUuid, String)> = started
                                .iter()
                                .map(|(u, (_, h))| (*u, h.to_string()))
                                .collect();
                            self.reporter.event(&ExecEvent::StragglersAbandoned { servers: &abandoned });
                            for (uuid, (t, hostname)) in &started {
                                report.servers.insert(*uuid, ServerOutcome {
                                    hostname: hostname.to_string(),
                                    status: ServerStatus::TimedOut,
                                    elapsed: now - *t,
                                    steps: Vec::new(),
                                    tasks: self.transport.tasks(*uuid),
                                    gates: Vec::new(),
                                    revert: None,
                                    failure: Some(Failure {
                                        component: None,
                                        stage: FailureStage::Straggler,
                                        message: format!(
                                            "stopped waiting {} after every other server finished (--straggler-timeout); the work may still complete on the server",
                                            super::report::fmt_duration(limit)
                                        ),
                                    }),
                                });
                            }
                            started.clear();
                            break;
                        }
                    } else {
                        straggler_since = None;
                    }
                }
            }
        }
        drop(running);

        // Whatever is left was still running when the run stopped waiting
        // (its work may complete on its own) or never started.
        let now = Instant::now();
        for (uuid, (t, hostname)) in &started {
            let tasks = self.transport.tasks(*uuid);
            let running: Vec<String> = tasks
                .iter()
                .filter(|t| t.waiting)
                .map(|t| format!("{} task {}", t.component, t.task))
                .collect();
            report.servers.insert(
                *uuid,
                ServerOutcome {
                    hostname: hostname.to_string(),
                    status: ServerStatus::Interrupted,
                    elapsed: now - *t,
                    steps: Vec::new(),
                    tasks,
                    gates: Vec::new(),
                    revert: None,
                    failure: Some(Failure {
                        component: None,
                        stage: FailureStage::Interrupted,
                        message: format!(
                            "still in progress when the run stopped waiting{}; it may still complete: run the same command again to finish or confirm",
                            if running.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", running.join(", "))
                            }
                        ),
                    }),
                },
            );
        }
        for (uuid, sp) in held.into_iter().chain(queue) {
            report.servers.insert(
                *uuid,
                ServerOutcome {
                    hostname: sp.hostname.clone(),
                    status: ServerStatus::NotStarted,
                    elapsed: Duration::ZERO,
                    steps: Vec::new(),
                    tasks: Vec::new(),
                    gates: Vec::new(),
                    revert: None,
                    failure: None,
                },
            );
        }
        if matches!(report.halted, Some(Halted::Canary { .. })) {
            report.service_changes_reverted = self.revert_service_changes(plan).await;
        }
        report.elapsed = started_at.elapsed();
        self.reporter.event(&ExecEvent::Finished(&report));
        Ok(report)
    }

    /// The servers running now, with the tasks still waited for.
    fn in_flight(&self, started: &BTreeMap<ServerUuid, (Instant, &str)>) -> Vec<InFlight> {
        let now = Instant::now();
        started
            .iter()
            .map(|(u, (t, h))| InFlight {
                server: *u,
                hostname: h.to_string(),
                elapsed: now - *t,
                tasks: self
                    .transport
                    .tasks(*u)
                    .into_iter()
                    .filter(|t| t.waiting)
                    .collect(),
            })
            .collect()
    }

    /// One server's turn: SAPI targets, steps batch by batch, SAPI writes
    /// that follow. Never returns an error: failures are in the outcome.
    async fn run_server(&self, server: ServerUuid, sp: &ServerPlan) -> ServerOutcome {
        let started = Instant::now();
        let hostname = sp.hostname.as_str();
        self.reporter
            .event(&ExecEvent::ServerStarted { server, hostname });
        let mut outcome = ServerOutcome {
            hostname: sp.hostname.clone(),
            status: ServerStatus::Succeeded,
            elapsed: Duration::ZERO,
            steps: Vec::with_capacity(sp.steps.len()),
            failure: None,
            tasks: Vec::new(),
            gates: Vec::new(),
            revert: None,
        };

        for change in sp.intent.iter().filter(|c| c.runs_before_steps()) {
            if let Err(err) = self.store.apply(server, change, None).await {
                outcome.status = ServerStatus::Failed;
                outcome.failure = Some(Failure {
                    component: Some(change.component().to_string()),
                    stage: FailureStage::Sapi,
                    message: error_chain(&err),
                });
                outcome.steps = sp.steps.iter().map(not_run).collect();
                outcome.elapsed = started.elapsed();
                outcome.tasks = self.transport.tasks(server);
                return outcome;
            }
        }

        let mut reported: BTreeMap<&str, Option<InstanceUuid>> = BTreeMap::new();
        let mut unhealthy: Option<(&Step, Option<String>)> = None;
        for batch in sp.batches() {
            if outcome.failure.is_some() {
                outcome.steps.extend(batch.iter().map(not_run));
                continue;
            }
            let results: Vec<StepRun> = if batch.len() > 1 && self.options.parallel_within_server {
                self.run_together(server, hostname, batch).await
            } else {
                let mut v = Vec::with_capacity(batch.len());
                for st in batch {
                    let r = self.run_step(server, hostname, st).await;
                    let failed = r.1.is_err();
                    v.push(r);
                    if failed {
                        break;
                    }
                }
                let ran = v.len();
                v.extend(batch[ran..].iter().map(|st| (not_run(st), Ok(None))));
                v
            };
            for (i, (result, r)) in results.into_iter().enumerate() {
                let step = &batch[i];
                if step.gate != Gate::None && result.status != StepStatus::NotRun {
                    match &r {
                        Ok(_) => outcome.gates.push(GateResult {
                            component: step.component.clone(),
                            gate: step.gate,
                            passed: true,
                        }),
                        Err((f, _)) if f.is_unhealthy() => {
                            outcome.gates.push(GateResult {
                                component: step.component.clone(),
                                gate: step.gate,
                                passed: false,
                            });
                            unhealthy.get_or_insert((step, f.revert_error.clone()));
                        }
                        Err(_) => {}
                    }
                }
                match r {
                    Ok(instance) => {
                        reported.insert(batch[i].component.as_str(), instance);
                    }
                    Err((f, timed_out)) => {
                        if outcome.failure.is_none() {
                            outcome.status = if timed_out {
                                ServerStatus::TimedOut
                            } else {
                                ServerStatus::Failed
                            };
                            outcome.failure = Some(Failure {
                                component: Some(result.component.clone()),
                                stage: f.stage,
                                message: f.message,
                            });
                        }
                    }
                }
                outcome.steps.push(result);
            }
        }

        if let Some((step, revert_error)) = unhealthy {
            outcome.revert = Some(self.revert_intent(server, sp, step, revert_error).await);
        }
        if outcome.failure.is_none() {
            for change in sp.intent.iter().filter(|c| !c.runs_before_steps()) {
                let instance = reported.get(change.component()).copied().flatten();
                if let Err(err) = self.store.apply(server, change, instance).await {
                    outcome.status = ServerStatus::Failed;
                    outcome.failure = Some(Failure {
                        component: Some(change.component().to_string()),
                        stage: FailureStage::Sapi,
                        message: error_chain(&err),
                    });
                    break;
                }
            }
        }
        outcome.elapsed = started.elapsed();
        outcome.tasks = self.transport.tasks(server);
        outcome
    }

    /// A failed canary: the new build reached no other server, so the
    /// service defaults this run set go back to what they were (where the
    /// plan knew it). Returns how many were put back; one that cannot be
    /// is left for the next run's plan (it shows the difference).
    async fn revert_service_changes(&self, plan: &Plan) -> usize {
        let mut n = 0;
        for change in &plan.service_changes {
            let Some(from) = change.from else { continue };
            let back = ServiceChange {
                component: change.component.clone(),
                service: change.service,
                from: Some(change.to.uuid),
                from_version: Some(change.to.version.clone()),
                to: ImageRef {
                    uuid: from,
                    name: change.component.clone(),
                    version: change.from_version.clone().unwrap_or_default(),
                    import_from: None,
                },
            };
            match self.store.set_service_image(&back).await {
                Ok(()) => n += 1,
                Err(e) => tracing::warn!(
                    component = %change.component,
                    error = %error_chain(&e),
                    "cannot put the service default image back after the failed canary"
                ),
            }
        }
        n
    }

    /// After an unhealthy step the server runs the previous image again
    /// (the installer rolled back, or the transport reinstalled it): put
    /// the SAPI instance's `params.image_uuid`, which this run pointed at
    /// the new image before the steps, back to the previous one, so intent
    /// never claims a reverted image.
    async fn revert_intent(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        step: &Step,
        revert_error: Option<String>,
    ) -> Revert {
        let previous = match &step.action {
            Action::Upgrade { from, .. } => from.image,
            _ => None,
        };
        let mut revert = Revert {
            component: step.component.clone(),
            image: previous,
            sapi: false,
            error: revert_error,
        };
        let Some(previous) = previous else {
            return revert;
        };
        for change in sp
            .intent
            .iter()
            .filter(|c| c.runs_before_steps() && c.component() == step.component)
        {
            let back = match change {
                IntentChange::UpdateInstance {
                    component,
                    service,
                    instance,
                    ..
                }
                | IntentChange::CreateInstance {
                    component,
                    service,
                    instance,
                    ..
                } => IntentChange::UpdateInstance {
                    component: component.clone(),
                    service: *service,
                    instance: *instance,
                    image: previous,
                },
                _ => continue,
            };
            match self.store.apply(server, &back, None).await {
                Ok(()) => revert.sapi = true,
                Err(e) => {
                    let msg = format!(
                        "cannot put params.image_uuid {previous} back on the SAPI instance: {}",
                        error_chain(&e)
                    );
                    revert.error = Some(match revert.error.take() {
                        Some(prev) => format!("{prev}; {msg}"),
                        None => msg,
                    });
                }
            }
        }
        revert
    }

    /// A batch of parallel-safe steps, concurrently, except that the steps
    /// through `agentsadm gz` (CNAPI execute) start once the cn-agent tasks
    /// are done. Both report the server's whole agent set to CNAPI
    /// (cn-agent's refreshAgents, the installer's report), each from its
    /// own read of the disk: run together, the later POST can carry a read
    /// taken before the other install finished and undo its report (a lost
    /// update; CNAPI 5xx retries widen the window). In this order the
    /// installer reads last. Results are in the batch's order.
    async fn run_together(
        &self,
        server: ServerUuid,
        hostname: &str,
        batch: &[Step],
    ) -> Vec<StepRun> {
        let (cn_agent, gz): (Vec<usize>, Vec<usize>) =
            (0..batch.len()).partition(|&i| batch[i].transport != TransportKind::Execute);
        let mut out: Vec<Option<StepRun>> = (0..batch.len()).map(|_| None).collect();
        for group in [cn_agent, gz] {
            let runs = futures::future::join_all(
                group
                    .iter()
                    .map(|&i| self.run_step(server, hostname, &batch[i])),
            )
            .await;
            for (i, run) in group.into_iter().zip(runs) {
                out[i] = Some(run);
            }
        }
        // Every index is in exactly one group, so nothing is dropped here.
        out.into_iter().flatten().collect()
    }

    /// Run one step under the task timeout. The error carries whether it
    /// was a timeout.
    async fn run_step(
        &self,
        server: ServerUuid,
        hostname: &str,
        step: &Step,
    ) -> (
        StepResult,
        Result<Option<InstanceUuid>, (StepFailure, bool)>,
    ) {
        self.reporter.event(&ExecEvent::StepStarted {
            server,
            hostname,
            step,
        });
        let t = Instant::now();
        let result =
            match tokio::time::timeout(self.options.task_timeout, self.transport.run(server, step))
                .await
            {
                Ok(Ok(done)) => Ok(done.instance),
                Ok(Err(f)) => Err((f, false)),
                Err(_) => {
                    // The step's future was dropped while waiting: its task is
                    // still marked as waited for.
                    let task = self
                        .transport
                        .tasks(server)
                        .into_iter()
                        .rfind(|t| t.waiting && t.component == step.component);
                    let what = match task {
                        Some(t) => format!("CNAPI task {} may still be running", t.task),
                        None => "the work may still be running on the server".to_string(),
                    };
                    Err((
                        StepFailure::new(
                            FailureStage::Timeout,
                            format!(
                                "no result after {} (--task-timeout); {what}",
                                super::report::fmt_duration(self.options.task_timeout)
                            ),
                        ),
                        true,
                    ))
                }
            };
        let elapsed = t.elapsed();
        self.reporter.event(&ExecEvent::StepFinished {
            server,
            hostname,
            step,
            elapsed,
            failure: result.as_ref().err().map(|(f, _)| f),
        });
        (
            StepResult {
                component: step.component.clone(),
                action: step.action.verb(),
                status: if result.is_ok() {
                    StepStatus::Done
                } else {
                    StepStatus::Failed
                },
                elapsed,
            },
            result,
        )
    }
}

/// A step's result and, on success, the instance the server reported; on
/// failure, whether it timed out.
type StepRun = (
    StepResult,
    Result<Option<InstanceUuid>, (StepFailure, bool)>,
);

fn not_run(step: &Step) -> StepResult {
    StepResult {
        component: step.component.clone(),
        action: step.action.verb(),
        status: StepStatus::NotRun,
        elapsed: Duration::ZERO,
    }
}
