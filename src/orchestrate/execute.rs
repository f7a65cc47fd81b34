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

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::outlier::{self, OutlierPolicy};
use super::plan::{Plan, ServerPlan, Step, TransportKind};
use super::report::{
    ExecEvent, ExecReport, Failure, FailureStage, Reporter, ServerOutcome, ServerStatus,
    StepResult, StepStatus,
};
use super::store::{IntentStore, IntentWriteError};
use super::transport::{StepFailure, Transport};
use crate::error::error_chain;
use crate::ids::{InstanceUuid, ServerUuid};

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
    /// servers and stops waiting for running ones.
    pub async fn execute(
        &self,
        plan: &Plan,
        cancel: impl Future<Output = ()>,
    ) -> Result<ExecReport, ExecError> {
        let started_at = Instant::now();
        let mut report = ExecReport::default();
        for change in &plan.service_changes {
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
        let mut queue = plan.servers_in_order().into_iter();
        let mut running = FuturesUnordered::new();
        let mut started: BTreeMap<ServerUuid, (Instant, &str)> = BTreeMap::new();
        let mut finished: Vec<Duration> = Vec::new();
        let mut warned: BTreeSet<ServerUuid> = BTreeSet::new();
        let mut straggler_since: Option<Instant> = None;
        let mut ticker = tokio::time::interval(self.options.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut queued = plan.servers.len();
        tokio::pin!(cancel);

        loop {
            while running.len() < concurrency {
                let Some((&uuid, sp)) = queue.next() else {
                    break;
                };
                queued -= 1;
                started.insert(uuid, (Instant::now(), sp.hostname.as_str()));
                running.push(async move { (uuid, self.run_server(uuid, sp).await) });
            }
            if running.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                () = &mut cancel => {
                    report.interrupted = true;
                    self.reporter.event(&ExecEvent::Interrupted);
                    break;
                }
                Some((uuid, outcome)) = running.next() => {
                    started.remove(&uuid);
                    if outcome.status == ServerStatus::Succeeded {
                        finished.push(outcome.elapsed);
                    }
                    self.reporter.event(&ExecEvent::ServerFinished { server: uuid, outcome: &outcome });
                    report.servers.insert(uuid, outcome);
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
                    if outlier::only_stragglers_left(queued, &running_now, &warned) {
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

        // Whatever is left was interrupted (running) or never started.
        let now = Instant::now();
        for (uuid, (t, hostname)) in &started {
            report.servers.insert(
                *uuid,
                ServerOutcome {
                    hostname: hostname.to_string(),
                    status: ServerStatus::Interrupted,
                    elapsed: now - *t,
                    steps: Vec::new(),
                    failure: Some(Failure {
                        component: None,
                        stage: FailureStage::Interrupted,
                        message: "the run was interrupted while this server was in progress; run the same command again to finish".to_string(),
                    }),
                },
            );
        }
        for (uuid, sp) in queue {
            report.servers.insert(
                *uuid,
                ServerOutcome {
                    hostname: sp.hostname.clone(),
                    status: ServerStatus::NotStarted,
                    elapsed: Duration::ZERO,
                    steps: Vec::new(),
                    failure: None,
                },
            );
        }
        report.elapsed = started_at.elapsed();
        self.reporter.event(&ExecEvent::Finished(&report));
        Ok(report)
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
                return outcome;
            }
        }

        let mut reported: BTreeMap<&str, Option<InstanceUuid>> = BTreeMap::new();
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
        outcome
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
        let result = match tokio::time::timeout(
            self.options.task_timeout,
            self.transport.run(server, step),
        )
        .await
        {
            Ok(Ok(done)) => Ok(done.instance),
            Ok(Err(f)) => Err((f, false)),
            Err(_) => Err((
                StepFailure::new(
                    FailureStage::Timeout,
                    format!(
                        "no result after {} (--task-timeout); the task may still be running on the server",
                        super::report::fmt_duration(self.options.task_timeout)
                    ),
                ),
                true,
            )),
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
