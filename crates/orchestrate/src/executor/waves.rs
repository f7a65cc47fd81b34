//! Running the plan's waves: servers start in the order the plan shows,
//! [`agentsadm_plan::Rollout::concurrency`] at a time; the canary wave
//! (when there is one) finishes and passes before any other server starts;
//! a server whose rack is full waits (the next server in order whose rack
//! has room goes first); once more servers have failed than the budget
//! allows, or the lock is lost, no new server starts. Outliers are checked
//! on a tick (a server with a history of its own against that; the others
//! against the median once enough servers finished, before that against
//! their expected time, [`crate::baseline`]), and with
//! `--straggler-timeout` the run stops waiting for any server that has run
//! that long, from the first server on (its work may still complete).
//!
//! A server's slot is free once its steps are done: the SAPI writes that
//! follow them change no server, and the next server starts while they
//! finish (the server still counts as running, and its outcome, failure
//! budget included, is known when they are done).
//!
//! An API that stops answering pauses the rollout: no server starts, the
//! servers in flight are waited for (none is failed or slow for it), a
//! server whose turn the outage cut starts again (a server cut more than
//! [`MAX_RESTARTS`] times ends unknown instead, and the run goes on: each
//! of those outages passed), and the APIs are asked
//! on each tick until all answer (the run carries on) or
//! [`crate::execute::ExecOptions::outage_wait`] has passed (the run
//! stops, naming the API). Slow servers are reported only once the APIs
//! are known to answer: one that is silent makes every server slow.
//!
//! Everything runs on the caller's task (no spawning): a small number of
//! futures waiting on the network, with no per-server setup cost.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::{AbortHandle, BoxFuture, LocalBoxFuture, OptionFuture, abortable};
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::carriers::guard::Hold;
use crate::executor::baseline::{self, Baseline, KnownDurations};
use crate::executor::execute::{Executor, RunGate};
use crate::vocabulary::outlier::Outlier;
use crate::vocabulary::report::CanaryResult;
use crate::vocabulary::report::ExecEvent;
use crate::vocabulary::report::ExecReport;
use crate::vocabulary::report::Failure;
use crate::vocabulary::report::FailureStage;
use crate::vocabulary::report::Halted;
use crate::vocabulary::report::InFlight;
use crate::vocabulary::report::Pause;
use crate::vocabulary::report::ServerOutcome;
use crate::vocabulary::report::ServerStatus;
use agentsadm_api::Api;
use agentsadm_plan::Plan;
use agentsadm_plan::ServerPlan;
use agentsadm_types::ids::ServerUuid;

/// Where a rollout stands.
struct Waves<'p> {
    /// Servers not started yet, in the plan's order.
    queue: VecDeque<(ServerUuid, &'p ServerPlan)>,
    /// Passed over because their rack was full, in order.
    held: VecDeque<(ServerUuid, &'p ServerPlan)>,
    canaries: BTreeSet<ServerUuid>,
    canary_hosts: Vec<String>,
    canary_done: usize,
    canary_failed: Vec<String>,
    /// Canaries that neither succeeded nor failed (stopped, unknown).
    canary_unsettled: usize,
    /// The servers after the canary wave may start.
    open: bool,
    launched: usize,
    max_per_rack: usize,
    in_rack: BTreeMap<&'p str, usize>,
    failures: usize,
    budget: Option<usize>,
    started: BTreeMap<ServerUuid, (Instant, &'p str)>,
    /// Durations of the servers that succeeded (for outliers).
    finished: Vec<Duration>,
    warned: BTreeSet<ServerUuid>,
    /// Each server's expected turn, where known.
    baselines: BTreeMap<ServerUuid, Option<Baseline>>,
    /// Cancels a server's turn given up on (`--straggler-timeout`).
    abort: BTreeMap<ServerUuid, AbortHandle>,
    /// Paused for an API that stopped answering.
    pause: Option<Paused>,
    /// Servers in flight during a pause: their time includes the wait, so
    /// they are neither outliers nor a measure of a normal turn.
    paused_over: BTreeSet<ServerUuid>,
    /// How many times an outage cut each server's turn (it starts again
    /// once the API answers, up to [`MAX_RESTARTS`] times).
    restarts: BTreeMap<ServerUuid, usize>,
    /// Slow servers not yet reported: first the APIs are asked, since an
    /// API that does not answer makes every server in flight slow.
    suspects: Vec<Outlier>,
}

/// An outage the rollout is waiting out.
struct Paused {
    api: Api,
    since: Instant,
    noticed: String,
    restarted: Vec<String>,
}

/// Turns an outage may cut before the server counts as unknown.
const MAX_RESTARTS: usize = 3;

/// Whether the wave loop goes on.
#[derive(PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

impl<'p> Waves<'p> {
    fn new(plan: &'p Plan, known: &KnownDurations) -> Waves<'p> {
        let rollout = plan.rollout();
        let queue: VecDeque<(ServerUuid, &ServerPlan)> = rollout
            .order()
            .filter_map(|w| plan.servers().get(&w.server).map(|sp| (w.server, sp)))
            .collect();
        let canaries: BTreeSet<ServerUuid> = rollout.canaries().iter().map(|w| w.server).collect();
        Waves {
            queue,
            held: VecDeque::new(),
            canary_hosts: rollout
                .canaries()
                .iter()
                .map(|w| w.hostname.clone())
                .collect(),
            open: canaries.is_empty(),
            canaries,
            canary_done: 0,
            canary_failed: Vec::new(),
            canary_unsettled: 0,
            launched: 0,
            max_per_rack: rollout.max_per_rack.unwrap_or(usize::MAX).max(1),
            in_rack: BTreeMap::new(),
            failures: 0,
            budget: rollout.budget,
            started: BTreeMap::new(),
            finished: Vec::new(),
            warned: BTreeSet::new(),
            baselines: plan
                .servers()
                .iter()
                .map(|(u, sp)| (*u, known.server_baseline(*u, sp)))
                .collect(),
            abort: BTreeMap::new(),
            pause: None,
            paused_over: BTreeSet::new(),
            restarts: BTreeMap::new(),
            suspects: Vec::new(),
        }
    }

    /// A started server whose turn an outage cut: it starts again, first
    /// in line, once the API answers.
    fn restart_later(&mut self, uuid: ServerUuid, sp: &'p ServerPlan) {
        *self.restarts.entry(uuid).or_default() += 1;
        self.not_started(uuid, sp);
    }

    fn rack_has_room(&self, sp: &ServerPlan) -> bool {
        sp.rack
            .as_deref()
            .is_none_or(|r| self.in_rack.get(r).copied().unwrap_or(0) < self.max_per_rack)
    }

    /// Whether the next server may start as far as the canary wave goes.
    fn wave_allows(&self) -> bool {
        self.open || self.launched < self.canaries.len()
    }

    /// The next server to start: the first held one whose rack has room,
    /// else the next in order (passing over full racks into `held`).
    fn next(&mut self) -> Option<(ServerUuid, &'p ServerPlan)> {
        if let Some(i) = self.held.iter().position(|(_, sp)| self.rack_has_room(sp)) {
            return self.held.remove(i);
        }
        while let Some(e) = self.queue.pop_front() {
            if self.rack_has_room(e.1) {
                return Some(e);
            }
            self.held.push_back(e);
        }
        None
    }

    /// A server taken by [`Waves::next`] that did not start after all.
    /// A server started that did not begin (its turn found the lock not
    /// held): as if never started, first in the queue again.
    fn not_started(&mut self, uuid: ServerUuid, sp: &'p ServerPlan) {
        self.started.remove(&uuid);
        if let Some(n) = sp.rack.as_deref().and_then(|r| self.in_rack.get_mut(r)) {
            *n = n.saturating_sub(1);
        }
        self.launched = self.launched.saturating_sub(1);
        self.queue.push_front((uuid, sp));
    }

    fn start(&mut self, uuid: ServerUuid, sp: &'p ServerPlan) {
        self.launched += 1;
        if let Some(r) = sp.rack.as_deref() {
            *self.in_rack.entry(r).or_default() += 1;
        }
        self.started
            .insert(uuid, (Instant::now(), sp.hostname.as_str()));
    }

    /// Servers not started yet.
    fn waiting(&self) -> usize {
        self.queue.len() + self.held.len()
    }

    /// A server finished: count it, and decide about the canary wave and
    /// the budget.
    async fn finished(
        &mut self,
        plan: &Plan,
        uuid: ServerUuid,
        outcome: &ServerOutcome,
        report: &mut ExecReport,
        gate: &impl RunGate,
    ) {
        self.started.remove(&uuid);
        if let Some(r) = plan.servers().get(&uuid).and_then(|sp| sp.rack.as_deref())
            && let Some(n) = self.in_rack.get_mut(r)
        {
            *n = n.saturating_sub(1);
        }
        let failed = matches!(
            outcome.status,
            ServerStatus::Failed | ServerStatus::TimedOut
        );
        if outcome.status == ServerStatus::Succeeded && !self.paused_over.contains(&uuid) {
            self.finished.push(outcome.elapsed);
        }
        if failed {
            self.failures += 1;
        }
        if !self.open && self.canaries.contains(&uuid) {
            self.canary_done += 1;
            if failed {
                self.canary_failed.push(outcome.hostname.clone());
            } else if outcome.status != ServerStatus::Succeeded {
                self.canary_unsettled += 1;
            }
            if self.canary_done == self.canaries.len() {
                let passed = self.canary_failed.is_empty() && self.canary_unsettled == 0;
                tracing::info!(target: agentsadm_types::log::FILE_ONLY_TARGET,
                    component = "executor", event = "canary", passed,
                    servers = self.canary_hosts.join(","),
                    failed = self.canary_failed.join(","),
                    "canary wave {} on {}{}",
                    if passed { "passed" } else { "failed" },
                    self.canary_hosts.join(", "),
                    if passed { String::new() } else { format!(" (failed: {})", self.canary_failed.join(", ")) });
                report.canary = Some(CanaryResult {
                    servers: self.canary_hosts.clone(),
                    passed,
                });
                let waiting = self.waiting();
                if self.canary_failed.is_empty() && !passed {
                    // Stopped or unknown: the lost lock or API halts the
                    // run and says why.
                } else if !passed {
                    report.halted = Some(Halted::Canary {
                        failed: std::mem::take(&mut self.canary_failed),
                    });
                } else if waiting == 0 || gate.canary_passed(&self.canary_hosts, waiting).await {
                    self.open = true;
                } else {
                    report.halted = Some(Halted::Declined);
                }
            }
        }
        if let Some(b) = self.budget
            && self.failures > b
            && report.halted.is_none()
        {
            report.halted = Some(Halted::Budget {
                failures: self.failures,
                budget: b,
            });
        }
    }
}

/// The servers whose steps are done and whose SAPI writes are not.
#[derive(Default)]
struct Slots {
    writing: AtomicUsize,
    /// Wakes the loop when a slot frees up.
    freed: Notify,
}

impl Slots {
    fn writing(&self) -> usize {
        self.writing.load(Ordering::SeqCst)
    }
}

/// One server's slot: freed once ([`Slot::free`]); counted back when the
/// turn ends (or is given up on) and this is dropped.
struct Slot<'s> {
    slots: &'s Slots,
    freed: AtomicBool,
}

impl<'s> Slot<'s> {
    fn new(slots: &'s Slots) -> Slot<'s> {
        Slot {
            slots,
            freed: AtomicBool::new(false),
        }
    }

    fn free(&self) {
        if !self.freed.swap(true, Ordering::SeqCst) {
            self.slots.writing.fetch_add(1, Ordering::SeqCst);
            self.slots.freed.notify_one();
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if *self.freed.get_mut() {
            self.slots.writing.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Executor<'_> {
    /// Run the plan's servers in their waves, recording each outcome in
    /// `report`. `cancel` resolving (Ctrl-C) stops starting servers.
    pub(crate) async fn run_waves(
        &self,
        plan: &Plan,
        report: &mut ExecReport,
        cancel: impl std::future::Future<Output = ()>,
        gate: &impl RunGate,
    ) {
        let mut w = Waves::new(plan, &self.options.known);
        let concurrency = plan.rollout().concurrency.max(1);
        let slots = Slots::default();
        let mut running = FuturesUnordered::new();
        let mut ticker = tokio::time::interval(self.options.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(cancel);
        // After an interrupt, while waiting for the servers in flight: the
        // second interrupt.
        let mut stop_waiting: Option<LocalBoxFuture<'_, ()>> = None;
        // The APIs being asked whether they answer (paused, or before
        // slow servers are reported).
        let mut probing: Option<BoxFuture<'_, Option<Api>>> = None;
        loop {
            while running.len().saturating_sub(slots.writing()) < concurrency
                && report.halted.is_none()
                && !report.interrupted
                && w.pause.is_none()
                && w.wave_allows()
            {
                if gate.lock_lost() {
                    self.halt(report, Halted::LockLost);
                    break;
                }
                let Some((uuid, sp)) = w.next() else { break };
                // The confirmation before each server (and so before each
                // wave's first) is the turn's own (`Executor::turn`): read
                // here, it held up every turn in flight, polled by this
                // loop, for as long as SAPI took to answer.
                w.start(uuid, sp);
                let slots = &slots;
                let (turn, handle) = abortable(async move {
                    let slot = Slot::new(slots);
                    (uuid, self.turn(uuid, sp, &|| slot.free()).await)
                });
                w.abort.insert(uuid, handle);
                running.push(turn);
            }
            let waits_out_outage =
                w.pause.is_some() && report.halted.is_none() && !report.interrupted;
            if running.is_empty() && !waits_out_outage {
                break;
            }
            tokio::select! {
                biased;
                () = &mut cancel, if !report.interrupted => {
                    report.interrupted = true;
                    let in_flight = self.in_flight(&w.started);
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
                    let in_flight = self.in_flight(&w.started);
                    self.reporter.event(&ExecEvent::StoppedWaiting { in_flight: &in_flight });
                    break;
                }
                Some(turn) = running.next() => {
                    // A turn given up on was recorded when it was.
                    let Ok((uuid, turn)) = turn else { continue };
                    w.abort.remove(&uuid);
                    let outcome = match turn {
                        Ok(outcome) => outcome,
                        Err(hold) => {
                            self.not_started(plan, &mut w, uuid, hold, report);
                            continue;
                        }
                    };
                    if self.turn_ended(plan, &mut w, uuid, outcome, report, gate).await == Flow::Stop {
                        break;
                    }
                }
                Some(down) = OptionFuture::from(probing.as_mut()), if probing.is_some() => {
                    probing = None;
                    if self.probed(&mut w, report, down) == Flow::Stop {
                        // Waiting on the servers in flight means waiting
                        // on the API that is gone.
                        break;
                    }
                }
                () = slots.freed.notified() => {}
                _ = ticker.tick() => {
                    if w.pause.is_some() || !w.suspects.is_empty() {
                        if probing.is_none() {
                            probing = Some(self.probe.down());
                        }
                        continue;
                    }
                    for (uuid, outcome) in self.tick(&mut w) {
                        if let Some(turn) = w.abort.remove(&uuid) {
                            turn.abort();
                        }
                        self.reporter.event(&ExecEvent::ServerFinished { server: uuid, outcome: &outcome });
                        w.finished(plan, uuid, &outcome, report, gate).await;
                        report.servers.insert(uuid, outcome);
                    }
                }
            }
        }
        drop(running);
        self.leftovers(w, report);
    }

    /// A server whose turn found the lock `hold` (lost, or not confirmed)
    /// before changing anything: not started, it waits in front of the
    /// queue; the run halts (lost) or pauses (the API that did not
    /// answer).
    fn not_started<'p>(
        &self,
        plan: &'p Plan,
        w: &mut Waves<'p>,
        uuid: ServerUuid,
        hold: Hold,
        report: &mut ExecReport,
    ) {
        let Some(sp) = plan.servers().get(&uuid) else {
            return;
        };
        w.not_started(uuid, sp);
        match hold {
            Hold::Held => {}
            Hold::Lost => self.halt(report, Halted::LockLost),
            Hold::Unconfirmed(api) => {
                self.pause(w, api, &format!("before starting {}", sp.hostname));
            }
        }
    }

    /// A server's turn ended. One an outage cut starts again once the API
    /// answers (the run pauses), up to [`MAX_RESTARTS`] times; any other
    /// is recorded.
    async fn turn_ended<'p>(
        &self,
        plan: &'p Plan,
        w: &mut Waves<'p>,
        uuid: ServerUuid,
        mut outcome: ServerOutcome,
        report: &mut ExecReport,
        gate: &impl RunGate,
    ) -> Flow {
        let lost = outcome.failure.as_ref().map(|f| f.stage.clone());
        let noticed = format!("during the turn of {}", outcome.hostname);
        // The API the run waits for, when an outage cut this turn and the
        // run is neither halted nor interrupted.
        let waits_for = match lost {
            Some(FailureStage::ApiLost { api })
                if report.halted.is_none() && !report.interrupted =>
            {
                Some(api)
            }
            _ => None,
        };
        if let Some(api) = waits_for
            && w.restarts.get(&uuid).copied().unwrap_or(0) < MAX_RESTARTS
            && let Some(sp) = plan.servers().get(&uuid)
        {
            w.restart_later(uuid, sp);
            self.pause(w, api, &noticed);
            if let Some(p) = w.pause.as_mut() {
                p.restarted.push(outcome.hostname.clone());
            }
            return Flow::Go;
        }
        // Cut once too often by an API that answered again each time (a
        // pause ends only then): the server's own bad luck, not the
        // outage of the run. It ends unknown and the run waits for the
        // API as for any cut turn; a canary still stops the run (its wave
        // cannot pass).
        let cut_too_often = waits_for.filter(|_| w.open || !w.canaries.contains(&uuid));
        if cut_too_often.is_some()
            && let Some(f) = outcome.failure.as_mut()
        {
            f.message = format!(
                "{}; its turn was cut {} times by an API that stopped answering: run the same command again to finish or confirm",
                f.message,
                MAX_RESTARTS + 1
            );
        }
        self.reporter.event(&ExecEvent::ServerFinished {
            server: uuid,
            outcome: &outcome,
        });
        w.finished(plan, uuid, &outcome, report, gate).await;
        report.servers.insert(uuid, outcome);
        match lost {
            Some(FailureStage::ApiLost { api }) => {
                if let Some(api) = cut_too_often {
                    self.pause(w, api, &noticed);
                    return Flow::Go;
                }
                self.outage(report, api, &noticed);
                Flow::Stop
            }
            Some(FailureStage::LockLost) => {
                self.halt(report, Halted::LockLost);
                Flow::Go
            }
            _ => Flow::Go,
        }
    }

    /// `api` stopped answering (noticed at `noticed`): no server starts
    /// until it answers again, and the servers in flight are no outliers.
    /// Said once per outage.
    fn pause(&self, w: &mut Waves<'_>, api: Api, noticed: &str) {
        w.suspects.clear();
        w.paused_over.extend(w.started.keys().copied());
        w.warned.extend(w.started.keys().copied());
        if w.pause.is_some() {
            return;
        }
        tracing::debug!(%api, noticed, "an API stopped answering: pausing");
        self.reporter.event(&ExecEvent::Paused {
            api,
            noticed,
            bound: self.options.outage_wait,
        });
        w.pause = Some(Paused {
            api,
            since: Instant::now(),
            noticed: noticed.to_string(),
            restarted: Vec::new(),
        });
    }

    /// What asking the APIs found (`down`: the first that does not
    /// answer): a pause ends when all answer, or stops the run once it
    /// lasted [`crate::execute::ExecOptions::outage_wait`]; slow servers
    /// are reported only while every API answers.
    fn probed(&self, w: &mut Waves<'_>, report: &mut ExecReport, down: Option<Api>) -> Flow {
        match (w.pause.take(), down) {
            (Some(p), None) => {
                let after = p.since.elapsed();
                self.reporter
                    .event(&ExecEvent::Resumed { api: p.api, after });
                report.pauses.push(Pause {
                    api: p.api,
                    noticed: p.noticed,
                    waited: after,
                    answered: true,
                    restarted: p.restarted,
                });
            }
            (Some(p), Some(_)) if p.since.elapsed() >= self.options.outage_wait => {
                let waited = p.since.elapsed();
                let noticed = format!(
                    "{}; waited {} for it to answer again",
                    p.noticed,
                    crate::vocabulary::report::fmt_duration(waited)
                );
                report.pauses.push(Pause {
                    api: p.api,
                    noticed: p.noticed,
                    waited,
                    answered: false,
                    restarted: p.restarted,
                });
                self.outage(report, p.api, &noticed);
                return Flow::Stop;
            }
            (Some(p), Some(_)) => w.pause = Some(p),
            (None, Some(api)) => self.pause(
                w,
                api,
                "while the servers in flight took far longer than expected",
            ),
            (None, None) => {
                for o in std::mem::take(&mut w.suspects) {
                    if w.started.contains_key(&o.server) && !w.paused_over.contains(&o.server) {
                        self.reporter.event(&ExecEvent::Outlier(&o));
                        report.outliers.push(o);
                    }
                }
            }
        }
        Flow::Go
    }

    /// Find new outliers ([`baseline::outliers`]: a server with a
    /// history of its own against itself, the others against the median
    /// once enough servers finished, else their expected turn), reported
    /// once the APIs are known to answer ([`Executor::probed`]); with
    /// `--straggler-timeout`, give up on the servers that have run that
    /// long. Returns the servers given up on, with their outcome.
    fn tick(&self, w: &mut Waves<'_>) -> Vec<(ServerUuid, ServerOutcome)> {
        let now = Instant::now();
        let policy = &self.options.outlier;
        let running = w
            .started
            .iter()
            .map(|(u, (t, h))| (*u, *h, now - *t, w.baselines.get(u).copied().flatten()));
        let fresh = baseline::outliers(policy, &w.finished, running, &w.warned);
        for o in fresh {
            w.warned.insert(o.server);
            w.suspects.push(o);
        }
        let Some(limit) = self.options.straggler_timeout else {
            return Vec::new();
        };
        let overdue: Vec<(ServerUuid, String, Duration)> = w
            .started
            .iter()
            .filter(|(_, (t, _))| now - *t >= limit)
            .map(|(u, (t, h))| (*u, h.to_string(), now - *t))
            .collect();
        if overdue.is_empty() {
            return Vec::new();
        }
        let abandoned: Vec<(ServerUuid, String)> =
            overdue.iter().map(|(u, h, _)| (*u, h.clone())).collect();
        self.reporter.event(&ExecEvent::StragglersAbandoned {
            servers: &abandoned,
        });
        overdue
            .into_iter()
            .map(|(uuid, hostname, elapsed)| {
                let mut o = ServerOutcome::new(&hostname);
                o.elapsed = elapsed;
                o.tasks = self.transport.tasks(uuid);
                o.fail(
                    ServerStatus::TimedOut,
                    Failure {
                        component: None,
                        stage: FailureStage::Straggler,
                        message: format!(
                            "stopped waiting after {} (--straggler-timeout); the work may still complete on the server",
                            crate::vocabulary::report::fmt_duration(limit)
                        ),
                    },
                );
                (uuid, o)
            })
            .collect()
    }

    /// Whatever is left was still running when the run stopped waiting
    /// (its work may complete on its own) or never started.
    fn leftovers(&self, w: Waves<'_>, report: &mut ExecReport) {
        let now = Instant::now();
        let outage = report.outage.clone().filter(|_| !report.interrupted);
        for (uuid, (t, hostname)) in &w.started {
            let mut o = ServerOutcome::new(hostname);
            o.elapsed = now - *t;
            o.tasks = self.transport.tasks(*uuid);
            let running = o.waiting_tasks();
            if let Some(outage) = &outage {
                o.fail(
                    ServerStatus::Unknown,
                    Failure {
                        component: None,
                        stage: FailureStage::ApiLost { api: outage.api },
                        message: format!(
                            "in flight when {} stopped answering; how it ended is not known{}",
                            outage.api,
                            if running.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", running.join(", "))
                            }
                        ),
                    },
                );
                report.servers.insert(*uuid, o);
                continue;
            }
            o.fail(
                ServerStatus::Interrupted,
                Failure {
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
                },
            );
            report.servers.insert(*uuid, o);
        }
        for (uuid, sp) in w.held.into_iter().chain(w.queue) {
            let mut o = ServerOutcome::new(&sp.hostname);
            o.status = ServerStatus::NotStarted;
            report.servers.insert(uuid, o);
        }
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
}
