//! One server's turn: its SAPI instance targets, its steps batch by batch
//! (core components alone, the parallel-safe set concurrently; the
//! execute-carried installs of a batch in one `gz install` where the plan
//! groups them, `carriers/transport/together.rs`), each
//! install bounded by the task timeout, the health gates after installs
//! through cn-agent overlapping the next batches' installs
//! ([`crate::executor::gate`] decides what a gate leads to), then the
//! SAPI writes that follow installs and removals. An unhealthy step is
//! reverted and its intent put back. A turn never fails as a whole: what
//! went wrong is in its [`ServerOutcome`].

use agentsadm_types::catalog::OrderClass;
use agentsadm_types::catalog::PostinstallSapi;
use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use crate::carriers::guard::Hold;
use crate::carriers::transport::StepDone;
use crate::carriers::transport::StepFailure;
use crate::executor::execute::Executor;
use crate::vocabulary::report::ExecEvent;
use crate::vocabulary::report::Failure;
use crate::vocabulary::report::FailureStage;
use crate::vocabulary::report::GateResult;
use crate::vocabulary::report::Revert;
use crate::vocabulary::report::ServerOutcome;
use crate::vocabulary::report::ServerStatus;
use crate::vocabulary::report::StepResult;
use crate::vocabulary::report::StepStatus;
use agentsadm_plan::Action;
use agentsadm_plan::Gate;
use agentsadm_plan::IntentChange;
use agentsadm_plan::ServerPlan;
use agentsadm_plan::Step;
use agentsadm_plan::TransportKind;
use agentsadm_types::error::error_chain;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

/// A step's result and, on success, the instance the server reported; on
/// failure, whether it timed out.
pub(crate) type StepRun = (
    StepResult,
    Result<Option<InstanceUuid>, (StepFailure, bool)>,
);

pub(crate) fn not_run(step: &Step) -> StepResult {
    StepResult {
        component: step.component.to_string(),
        action: step.action.verb(),
        status: StepStatus::NotRun,
        elapsed: Duration::ZERO,
        task: None,
        gate: None,
        installed: false,
    }
}

/// A plan batch's installs that start together (a batch's cn-agent
/// tasks, then its steps through `agentsadm gz`), or one step. `group`:
/// the batch (one at a time: the step) it belongs to: a failure stops the
/// groups not started yet, not the rest of its own.
struct Phase {
    group: usize,
    steps: Vec<usize>,
    /// Its gates are waited for before anything else starts (a core-first
    /// component: what comes after it needs it working).
    waits_for_gates: bool,
}

/// The install phases of a server's plan, in order. Within a batch of
/// parallel-safe steps (`together`), the steps through `agentsadm gz`
/// (CNAPI execute) start once the cn-agent tasks are done: both report
/// the server's whole agent set to CNAPI (cn-agent's refreshAgents, the
/// installer's report), each from its own read of the disk; run together,
/// the later POST can carry a read taken before the other install
/// finished and undo its report (a lost update; CNAPI 5xx retries widen
/// the window). In this order the installer reads last.
fn phases(sp: &ServerPlan, together: bool) -> Vec<Phase> {
    let mut out = Vec::new();
    let (mut at, mut group) = (0, 0);
    for batch in sp.batches() {
        let steps: Vec<usize> = (at..at + batch.len()).collect();
        at += batch.len();
        let waits_for_gates = batch.iter().any(|st| st.order == OrderClass::CoreFirst);
        if batch.len() > 1 && together {
            let (cn_agent, gz): (Vec<usize>, Vec<usize>) = steps
                .into_iter()
                .partition(|&i| sp.steps[i].transport == TransportKind::InstallAgent);
            for steps in [cn_agent, gz].into_iter().filter(|s| !s.is_empty()) {
                out.push(Phase {
                    group,
                    steps,
                    waits_for_gates,
                });
            }
            group += 1;
        } else {
            for i in steps {
                out.push(Phase {
                    group,
                    steps: vec![i],
                    waits_for_gates,
                });
                group += 1;
            }
        }
    }
    out
}

/// A phase's steps as they go to the server: each group of `shared` (the
/// plan's execute groups) whose members are all in the phase as one
/// request, every other step alone.
fn sharing(phase: &[usize], shared: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = shared
        .iter()
        .filter(|g| g.iter().all(|i| phase.contains(i)))
        .cloned()
        .collect();
    for &i in phase {
        if !out.iter().any(|g| g.contains(&i)) {
            out.push(vec![i]);
        }
    }
    out
}

/// Where a step of the turn is.
enum Stage {
    /// It ended (failed; or done, its gate passed or none to pass).
    Ended(usize, StepRun),
    /// Installed, started at that instant: its `gz health` gate is next.
    Installed(usize, Instant, StepDone),
    /// It failed its gate: the image before is to be put back.
    Unhealthy(usize, Instant, StepFailure),
}

/// The turn's steps while they run.
struct Steps {
    /// Each step's run once it ended, by its place in the plan.
    ended: Vec<Option<StepRun>>,
    /// Unhealthy steps whose revert waits for the installs in flight.
    reverts: Vec<(usize, Instant, StepFailure)>,
    /// A step failed: no batch starts any more.
    stopped: bool,
}

/// What the steps of a turn left behind for the writes after them.
#[derive(Default)]
struct Ran<'p> {
    /// The instance each installed component reported.
    reported: BTreeMap<&'p ComponentName, Option<InstanceUuid>>,
    /// The components cn-agent's install task installed or upgraded.
    by_cn_agent: std::collections::BTreeSet<&'p ComponentName>,
    /// The unhealthy steps, and why each one's revert failed (if it did).
    unhealthy: Vec<(&'p Step, Option<String>)>,
}

/// The instance `step`'s component must carry after cn-agent ran it, now
/// running `image`, in one write: its server, the image, and its marks
/// (as the plan found them, with the plan's own mark changes on top).
/// `None` when the plan knows no instance for it (an install's adoption
/// writes it).
fn restore(sp: &ServerPlan, step: &Step, image: ImageUuid) -> Option<IntentChange> {
    let kept = step.record.as_ref()?;
    let mut marks = kept.marks.clone();
    for change in &sp.intent {
        if let IntentChange::Mark {
            component,
            key,
            mark,
            ..
        } = change
            && *component == step.component
        {
            marks.retain(|(k, _)| k != key);
            marks.extend(mark.clone().map(|m| (*key, m)));
        }
    }
    Some(IntentChange::Restore {
        component: step.component.clone(),
        service: kept.service,
        instance: kept.instance,
        image,
        marks,
    })
}

/// The writes an install through cn-agent needs after it (the agent's
/// postinstall may have re-adopted its instance bare): each such step's
/// instance, whole, at the step's target. Written whatever the plan wrote
/// before the steps (nothing, on a rerun whose intent already named the
/// target, a `check --fix` repair, `--ignore-holds`), except for a
/// component whose postinstall keeps the instance (what was written
/// before stands).
fn erased_by_postinstall(sp: &ServerPlan, ran: &Ran<'_>) -> Vec<IntentChange> {
    sp.steps
        .iter()
        .filter(|st| ran.by_cn_agent.contains(&st.component))
        .filter(|st| postinstall_of(st) != Some(PostinstallSapi::Keeps))
        .filter_map(|st| restore(sp, st, st.action.target()?.uuid))
        .collect()
}

/// What `step`'s postinstall does to its SAPI instance, for a step cn-agent
/// runs with a record to keep; `None` otherwise or when not known.
fn postinstall_of(step: &Step) -> Option<PostinstallSapi> {
    let by_cn_agent = step.transport == TransportKind::InstallAgent
        && matches!(step.action, Action::Install { .. } | Action::Upgrade { .. });
    step.record
        .as_ref()
        .filter(|_| by_cn_agent)
        .and_then(|r| r.postinstall)
}

/// Whether `change`, a write that runs before the steps, is left to the
/// write after them: its component's step goes through cn-agent and its
/// postinstall replaces the instance, so a target written before would be
/// gone after the step anyway, and the write after names the server, the
/// target and the marks in one ([`IntentChange::Restore`]). One SAPI write
/// per step instead of two. A run killed mid-step leaves what the step
/// leaves: the instance as it was if the task never started, bare if the
/// postinstall ran (as it did with the write before), and never a target
/// the server does not run (which the write before left when the task
/// failed). Marks are still written before.
fn left_for_after(sp: &ServerPlan, change: &IntentChange) -> bool {
    matches!(
        change,
        IntentChange::UpdateInstance { .. } | IntentChange::CreateInstance { .. }
    ) && sp.steps.iter().any(|st| {
        st.component == *change.component() && postinstall_of(st) == Some(PostinstallSapi::Replaces)
    })
}

impl Executor<'_> {
    /// A server's turn, once the datacenter lock is confirmed before it
    /// (the confirmation before each server, and so before each wave's
    /// first, before any change to it: here, in the turn, the rollout's
    /// other turns go on while SAPI answers). `Err`: not started, the
    /// lock lost or not confirmed.
    pub(crate) async fn turn(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        steps_done: &dyn Fn(),
    ) -> Result<ServerOutcome, Hold> {
        let what = format!("before starting {}", sp.hostname);
        match self.fence.confirm(&what).await {
            Hold::Held => Ok(self.run_server(server, sp, steps_done).await),
            other => Err(other),
        }
    }

    /// One server's turn. Never returns an error: failures are in the
    /// outcome. `steps_done` is called once the server's own work is over
    /// and only SAPI writes are left (its rollout slot is free then).
    pub(crate) async fn run_server(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        steps_done: &dyn Fn(),
    ) -> ServerOutcome {
        let started = Instant::now();
        self.reporter.event(&ExecEvent::ServerStarted {
            server,
            hostname: &sp.hostname,
        });
        let mut outcome = ServerOutcome::new(&sp.hostname);
        let before = sp
            .intent
            .iter()
            .filter(|c| c.runs_before_steps() && !left_for_after(sp, c));
        for change in before {
            if let Err(err) = self.store.apply(server, change, None).await {
                // Nothing ran on the server: stopped, if an API is what failed.
                let failure = sapi_failure(change, &err);
                let (status, failure) = match self.outage_of(&failure, err.outage()).await {
                    Some(api) => (
                        ServerStatus::Stopped,
                        api_lost(&failure, api, "nothing was started on this server"),
                    ),
                    None => (ServerStatus::Failed, failure),
                };
                outcome.fail(status, failure);
                outcome.steps = sp.steps.iter().map(not_run).collect();
                outcome.elapsed = started.elapsed();
                outcome.tasks = self.transport.tasks(server);
                return outcome;
            }
        }
        let ran = self.run_steps(server, sp, &mut outcome).await;
        steps_done();
        for (step, revert_error) in ran.unhealthy.clone() {
            let revert = self.revert_intent(server, sp, step, revert_error).await;
            match outcome.revert {
                None => outcome.revert = Some(revert),
                Some(_) => outcome.also_reverted.push(revert),
            }
        }
        if outcome.failure.is_none() {
            self.intent_after(server, sp, &ran, &mut outcome).await;
        } else if !ran.by_cn_agent.is_empty() {
            self.rewrite_after_cn_agent(server, sp, &ran).await;
        }
        outcome.elapsed = started.elapsed();
        outcome.tasks = self.transport.tasks(server);
        outcome
    }

    /// The SAPI writes that follow the steps (adoptions, deletions).
    ///
    /// cn-agent's install task runs the agent's own postinstall, and the
    /// modern agents (vm-agent, net-agent) re-adopt their instance with a
    /// bare create that replaces the whole SAPI object: the params written
    /// before their step (server, image, marks) are gone after it
    /// (docs/triton/agent-install.md §2.6), so they are written again.
    async fn intent_after(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        ran: &Ran<'_>,
        outcome: &mut ServerOutcome,
    ) {
        let again = erased_by_postinstall(sp, ran);
        let after = sp.intent.iter().filter(|c| !c.runs_before_steps());
        for change in again.iter().chain(after) {
            let instance = ran.reported.get(change.component()).copied().flatten();
            if let Err(err) = self.store.apply(server, change, instance).await {
                // The steps ran; what SAPI recorded of them is not known.
                let failure = sapi_failure(change, &err);
                let (status, failure) = match self.outage_of(&failure, err.outage()).await {
                    Some(api) => (
                        ServerStatus::Unknown,
                        api_lost(
                            &failure,
                            api,
                            "the steps ran; what SAPI records of them is not known",
                        ),
                    ),
                    None => (ServerStatus::Failed, failure),
                };
                outcome.fail(status, failure);
                break;
            }
            if let IntentChange::DeleteReplaced { instance: old, .. } = change
                && instance.is_some_and(|now| now != *old)
            {
                outcome.replaced.push(*old);
            }
        }
    }

    /// On a server whose turn failed after cn-agent installed something
    /// (its health check could not run): the writes its postinstall
    /// erased ([`Executor::intent_after`]), and nothing else, since the
    /// turn did not finish. The turn's failure stays what is reported; a
    /// write that fails here is logged.
    async fn rewrite_after_cn_agent(&self, server: ServerUuid, sp: &ServerPlan, ran: &Ran<'_>) {
        for change in &erased_by_postinstall(sp, ran) {
            let instance = ran.reported.get(change.component()).copied().flatten();
            if let Err(err) = self.store.apply(server, change, instance).await {
                tracing::warn!(%server, component = %change.component(), error = %error_chain(&err), "cannot write the SAPI instance again after cn-agent's install; 'agentsadm check --fix' writes it later");
            }
        }
    }

    /// The steps, overlapping the health gates: the plan's batches in
    /// order ([`phases`]), each starting once the one before it is
    /// installed, while the gates of the earlier ones still run (a
    /// core-first component's gates are waited for: what follows needs
    /// it working; cn-agent, core-last, still installs last). An
    /// unhealthy gate's revert waits until no install runs on the server
    /// (a cn-agent task and an installer both post the server's whole
    /// agent set, each from its own read). The first failure stops the
    /// batches not started; the gates running finish, and each unhealthy
    /// one reverts its own component only.
    async fn run_steps<'p>(
        &self,
        server: ServerUuid,
        sp: &'p ServerPlan,
        outcome: &mut ServerOutcome,
    ) -> Ran<'p> {
        let mut st = Steps {
            ended: sp.steps.iter().map(|_| None).collect(),
            reverts: Vec::new(),
            stopped: false,
        };
        let mut gates: FuturesUnordered<BoxFuture<'_, Stage>> = FuturesUnordered::new();
        let mut group = None;
        // Steps that go in one `gz install` (carriers/transport/together.rs).
        let shared = if self.options.parallel_within_server {
            sp.execute_groups()
        } else {
            Vec::new()
        };
        for phase in phases(sp, self.options.parallel_within_server) {
            if st.stopped && group != Some(phase.group) {
                continue;
            }
            group = Some(phase.group);
            let mut installs: FuturesUnordered<BoxFuture<'_, Vec<Stage>>> = FuturesUnordered::new();
            for members in sharing(&phase.steps, &shared) {
                installs.push(match members[..] {
                    [i] => Box::pin(async move { vec![self.install(server, sp, i).await] }),
                    _ => Box::pin(self.install_together(server, sp, members)),
                });
            }
            while !installs.is_empty() {
                let stages = tokio::select! {
                    Some(stages) = installs.next() => stages,
                    Some(stage) = gates.next(), if !gates.is_empty() => vec![stage],
                };
                for stage in stages {
                    if let Some(next) = self.take(server, sp, stage, &mut st, false) {
                        gates.push(next);
                    }
                }
            }
            // No install runs on the server now: the reverts waiting go.
            for (i, started, f) in std::mem::take(&mut st.reverts) {
                gates.push(Box::pin(self.revert(server, sp, i, started, f)));
            }
            if phase.waits_for_gates {
                while let Some(stage) = gates.next().await {
                    if let Some(next) = self.take(server, sp, stage, &mut st, true) {
                        gates.push(next);
                    }
                }
            }
        }
        while let Some(stage) = gates.next().await {
            if let Some(next) = self.take(server, sp, stage, &mut st, true) {
                gates.push(next);
            }
        }
        self.ran(sp, st, outcome)
    }

    /// What a step's stage leads to: a gate or a revert to run next (when
    /// `idle`, no install runs on the server; otherwise a revert waits).
    fn take<'f>(
        &'f self,
        server: ServerUuid,
        sp: &'f ServerPlan,
        stage: Stage,
        st: &mut Steps,
        idle: bool,
    ) -> Option<BoxFuture<'f, Stage>> {
        match stage {
            Stage::Ended(i, run) => {
                st.stopped |= run.1.is_err();
                st.ended[i] = Some(run);
                None
            }
            Stage::Installed(i, started, done) => {
                Some(Box::pin(self.gate(server, sp, i, started, done)))
            }
            Stage::Unhealthy(i, started, f) => {
                st.stopped = true;
                if idle {
                    return Some(Box::pin(self.revert(server, sp, i, started, f)));
                }
                st.reverts.push((i, started, f));
                None
            }
        }
    }

    /// The turn's outcome from its ended steps, in the plan's order: the
    /// first failing step's failure is the server's.
    fn ran<'p>(&self, sp: &'p ServerPlan, st: Steps, outcome: &mut ServerOutcome) -> Ran<'p> {
        let mut ran = Ran::default();
        for (step, run) in sp.steps.iter().zip(st.ended) {
            let (result, r) = run.unwrap_or_else(|| (not_run(step), Ok(None)));
            outcome.gates.extend(result.gate.clone());
            let by_cn_agent = step.transport == TransportKind::InstallAgent
                && matches!(step.action, Action::Install { .. } | Action::Upgrade { .. });
            if by_cn_agent && r.as_ref().is_err_and(|(f, _)| f.installed) {
                ran.by_cn_agent.insert(&step.component);
            }
            if let Err((f, _)) = &r
                && f.is_unhealthy()
            {
                ran.unhealthy.push((step, f.revert_error.clone()));
            }
            match r {
                Ok(_) if result.status != StepStatus::Done => {}
                Ok(instance) => {
                    ran.reported.insert(&step.component, instance);
                    if by_cn_agent {
                        ran.by_cn_agent.insert(&step.component);
                    }
                }
                Err((f, timed_out)) if outcome.failure.is_none() => {
                    let status = match result.status {
                        StepStatus::NotRun => ServerStatus::Stopped,
                        StepStatus::Unknown => ServerStatus::Unknown,
                        _ if timed_out => ServerStatus::TimedOut,
                        _ => ServerStatus::Failed,
                    };
                    outcome.fail(
                        status,
                        Failure {
                            component: Some(result.component.clone()),
                            stage: f.stage,
                            message: f.message,
                        },
                    );
                }
                Err(_) => {}
            }
            outcome.steps.push(result);
        }
        ran
    }

    /// Install `sp.steps[i]` under the task timeout (the install only: its
    /// gate is not part of it). Installed, when a `gz health` gate follows.
    async fn install(&self, server: ServerUuid, sp: &ServerPlan, i: usize) -> Stage {
        let step = &sp.steps[i];
        self.reporter.event(&ExecEvent::StepStarted {
            server,
            hostname: &sp.hostname,
            step,
        });
        let started = Instant::now();
        let timeout = self.options.task_timeout;
        let run = self.transport.run_fenced(server, step, self.fence);
        let ran = match tokio::time::timeout(timeout, run).await {
            Ok(Ok(done)) if step.gate == Gate::GzHealth => {
                return Stage::Installed(i, started, done);
            }
            Ok(Ok(done)) => Ok(done),
            Ok(Err(f)) => Err((f, false)),
            Err(_) => Err((self.timed_out(server, step), true)),
        };
        Stage::Ended(i, self.finish(server, sp, step, started, ran, None).await)
    }

    /// The steps at `members` of `sp` (one of its
    /// [`ServerPlan::execute_groups`]) in one request, bounded by one
    /// task timeout (they run at once on the server: the longest member's
    /// time, not the sum). Each member then ends as its own step: its
    /// progress line, result and failure (a failed gate was rolled back
    /// by the installer, for that member only).
    async fn install_together(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        members: Vec<usize>,
    ) -> Vec<Stage> {
        let steps: Vec<&Step> = members.iter().map(|&i| &sp.steps[i]).collect();
        for step in &steps {
            self.reporter.event(&ExecEvent::StepStarted {
                server,
                hostname: &sp.hostname,
                step,
            });
        }
        let started = Instant::now();
        let run = self.transport.run_together(server, &steps, self.fence);
        let ran: Vec<Result<StepDone, (StepFailure, bool)>> =
            match tokio::time::timeout(self.options.task_timeout, run).await {
                Ok(results) => results
                    .into_iter()
                    .map(|r| r.map_err(|f| (f, false)))
                    .collect(),
                Err(_) => steps
                    .iter()
                    .map(|st| Err((self.timed_out(server, st), true)))
                    .collect(),
            };
        let mut out = Vec::new();
        for ((i, step), ran) in members.into_iter().zip(steps).zip(ran) {
            let run = self.finish(server, sp, step, started, ran, None).await;
            out.push(Stage::Ended(i, run));
        }
        out
    }

    /// The gate of `sp.steps[i]`, installed as `done`.
    async fn gate(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        i: usize,
        started: Instant,
        done: StepDone,
    ) -> Stage {
        let step = &sp.steps[i];
        let ran = match self.check_gate(server, step).await {
            Ok(took) => {
                return Stage::Ended(
                    i,
                    self.finish(server, sp, step, started, Ok(done), Some(took))
                        .await,
                );
            }
            Err(f) if f.is_unhealthy() => return Stage::Unhealthy(i, started, f),
            Err(f) => Err((f, false)),
        };
        Stage::Ended(i, self.finish(server, sp, step, started, ran, None).await)
    }

    /// The revert of `sp.steps[i]`, which failed its gate.
    async fn revert(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        i: usize,
        started: Instant,
        unhealthy: StepFailure,
    ) -> Stage {
        let step = &sp.steps[i];
        let failure = self.revert_on_server(server, step, unhealthy).await;
        let run = self
            .finish(server, sp, step, started, Err((failure, false)), None)
            .await;
        Stage::Ended(i, run)
    }

    /// How a step that started at `started` ended, as reported: a failure
    /// judged (refused before it started, an outage's, the lock lost while
    /// it ran), its task and its gate.
    async fn finish(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        step: &Step,
        started: Instant,
        ran: Result<StepDone, (StepFailure, bool)>,
        gate_took: Option<Duration>,
    ) -> StepRun {
        let elapsed = started.elapsed();
        let task = self
            .transport
            .tasks(server)
            .into_iter()
            .rfind(|t| t.component == step.component)
            .map(|t| t.task);
        let gate = gate(step, &ran, gate_took);
        let mut result = ran.map(|done| done.instance);
        let mut status = if result.is_ok() {
            StepStatus::Done
        } else {
            StepStatus::Failed
        };
        if let Err((f, _)) = &result {
            if matches!(
                f.stage,
                FailureStage::LockLost | FailureStage::ApiLost { .. }
            ) {
                // Refused before it started.
                status = StepStatus::NotRun;
            } else if let Some(api) = self.outage_of(&failure_of(step, f), f.outage).await {
                status = StepStatus::Unknown;
                let lost = api_lost(
                    &failure_of(step, f),
                    api,
                    "how this step ended is not known",
                );
                result = Err((StepFailure::new(lost.stage, lost.message), false));
            } else if let Some(lost) = self.lost_while_running(server, step, f).await {
                status = StepStatus::Unknown;
                result = Err((lost, false));
            }
        }
        self.reporter.event(&ExecEvent::StepFinished {
            server,
            hostname: &sp.hostname,
            step,
            elapsed,
            failure: result.as_ref().err().map(|(f, _)| f),
            task,
            gate: gate.as_ref(),
        });
        (
            StepResult {
                component: step.component.to_string(),
                action: step.action.verb(),
                status,
                elapsed,
                task,
                gate,
                installed: status == StepStatus::Failed
                    && result.as_ref().is_err_and(|(f, _)| f.installed),
            },
            result,
        )
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
            component: step.component.to_string(),
            image: previous,
            sapi: false,
            error: revert_error,
        };
        let Some(previous) = previous else {
            return revert;
        };
        // Reinstalled through cn-agent: its postinstall may have re-adopted
        // the instance bare again; the whole record goes back in one write.
        if step.transport == TransportKind::InstallAgent
            && let Some(back) = restore(sp, step, previous)
        {
            match self.store.apply(server, &back, None).await {
                Ok(()) => revert.sapi = true,
                Err(e) => {
                    let msg = format!(
                        "cannot put the SAPI instance back (params.image_uuid {previous}): {}",
                        error_chain(&e)
                    );
                    revert.error = Some(match revert.error.take() {
                        Some(prev) => format!("{prev}; {msg}"),
                        None => msg,
                    });
                }
            }
            return revert;
        }
        match self
            .put_back_instance(server, sp, &step.component, previous)
            .await
        {
            Ok(wrote) => revert.sapi = wrote,
            Err(msg) => {
                revert.error = Some(match revert.error.take() {
                    Some(prev) => format!("{prev}; {msg}"),
                    None => msg,
                });
            }
        }
        revert
    }

    /// Point the instance targets this turn wrote for `component` back at
    /// `previous`. `Ok(true)`: something was put back.
    pub(crate) async fn put_back_instance(
        &self,
        server: ServerUuid,
        sp: &ServerPlan,
        component: &str,
        previous: ImageUuid,
    ) -> Result<bool, String> {
        let mut wrote = false;
        for change in sp.intent.iter().filter(|c| {
            c.runs_before_steps() && c.component() == component && !left_for_after(sp, c)
        }) {
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
                    // The marks it wrote before stay (a merge).
                    marks: Vec::new(),
                },
                _ => continue,
            };
            self.store.apply(server, &back, None).await.map_err(|e| {
                format!(
                    "cannot put params.image_uuid {previous} back on the SAPI instance: {}",
                    error_chain(&e)
                )
            })?;
            wrote = true;
        }
        Ok(wrote)
    }

    /// A step that failed while the run no longer held the datacenter
    /// lock (broken by a colleague's `--break-lock`, removed by a
    /// cleanup): the new holder may have been changing the same server
    /// (a step of its own removing the package this one checks), so how
    /// the step ended is not known, and it is not the server's failure.
    /// One read of the lock, only after a failure.
    async fn lost_while_running(
        &self,
        server: ServerUuid,
        step: &Step,
        failure: &StepFailure,
    ) -> Option<StepFailure> {
        let what = format!(
            "after the {} {} on server {server} failed",
            step.component,
            step.action.verb()
        );
        match self.fence.confirm(&what).await {
            Hold::Lost => Some(StepFailure::new(
                failure.stage.clone(),
                format!(
                    "how it ended is not known: the datacenter lock was lost while it ran, and its new holder may have changed this server ({})",
                    failure.message
                ),
            )),
            Hold::Held | Hold::Unconfirmed(_) => None,
        }
    }

    /// The failure of a step that ran into the task timeout. The step's
    /// future was dropped while waiting: its task is still marked as
    /// waited for.
    fn timed_out(&self, server: ServerUuid, step: &Step) -> StepFailure {
        let task = self
            .transport
            .tasks(server)
            .into_iter()
            .rfind(|t| t.waiting && t.component == step.component);
        let what = match task {
            Some(t) => format!("CNAPI task {} may still be running", t.task),
            None => "the work may still be running on the server".to_string(),
        };
        StepFailure::new(
            FailureStage::Timeout,
            format!(
                "no result after {} (--task-timeout); {what}",
                crate::vocabulary::report::fmt_duration(self.options.task_timeout)
            ),
        )
    }
}

impl Executor<'_> {
    /// Whether `failure` is an outage's: unless the server itself decided
    /// (unhealthy, changed since the plan), it is when the failed call
    /// met one (`seen`: refused, reset, cut short, timed out, a gateway's
    /// 502-504, even if the API answers again by now), else the APIs are
    /// asked, and the one that does not answer is returned (the raw error
    /// goes to the log, not the report).
    pub(crate) async fn outage_of(
        &self,
        failure: &Failure,
        seen: Option<agentsadm_api::Api>,
    ) -> Option<agentsadm_api::Api> {
        if matches!(
            failure.stage,
            FailureStage::Unhealthy | FailureStage::Changed | FailureStage::LockLost
        ) {
            return None;
        }
        let api = match (&failure.stage, seen) {
            (FailureStage::ApiLost { api }, _) => *api,
            (_, Some(api)) => api,
            _ => self.probe.down().await?,
        };
        // In the log only: the run says it once ([`ExecEvent::Paused`]).
        tracing::warn!(target: agentsadm_types::log::FILE_ONLY_TARGET, api = %api, error = %failure, "an API stopped answering");
        Some(api)
    }
}

/// The failure an outage of `api` makes of `failure`: `what` it means.
fn api_lost(failure: &Failure, api: agentsadm_api::Api, what: &str) -> Failure {
    Failure {
        component: failure.component.clone(),
        stage: FailureStage::ApiLost { api },
        message: format!("{api} stopped answering: {what}"),
    }
}

fn failure_of(step: &Step, f: &StepFailure) -> Failure {
    Failure {
        component: Some(step.component.to_string()),
        stage: f.stage.clone(),
        message: f.message.clone(),
    }
}

/// A step's health gate, from how the step ended: passed when it
/// succeeded, failed when it was unhealthy (the failure names the service
/// and its state); none when the step has no gate or failed before it.
fn gate(
    step: &Step,
    ran: &Result<StepDone, (StepFailure, bool)>,
    took: Option<Duration>,
) -> Option<GateResult> {
    if step.gate == Gate::None {
        return None;
    }
    let (passed, seen, elapsed) = match ran {
        Ok(_) => (
            true,
            match step.gate {
                // Without execute only CNAPI's report is seen.
                Gate::ServerAgents => "the new image in server.agents".to_string(),
                _ => "online".to_string(),
            },
            took,
        ),
        Err((f, _)) if f.is_unhealthy() => (false, f.message.clone(), None),
        Err(_) => return None,
    };
    Some(GateResult {
        component: step.component.to_string(),
        gate: step.gate,
        passed,
        seen,
        elapsed,
    })
}

fn sapi_failure(change: &IntentChange, err: &crate::carriers::store::IntentWriteError) -> Failure {
    Failure {
        component: Some(change.component().to_string()),
        stage: FailureStage::Sapi,
        message: error_chain(err),
    }
}
