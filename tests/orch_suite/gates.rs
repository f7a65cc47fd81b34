//! Health gates that overlap (issue 35), on the fake datacenter with
//! tokio's paused clock: on one server, the `gz health` gate of one
//! component runs while the next batch installs; a core-first
//! component's gate is waited for; cn-agent still installs last; the
//! first failure stops the batches not started while the gates running
//! finish; a failing gate reverts only its own component. Every time
//! below is the paused clock's (no wall-clock assertion).

use std::sync::Mutex;
use std::time::Duration;

use agentsadm_orchestrate::execute::ExecOptions;
use agentsadm_orchestrate::report::{ExecEvent, ExecReport, Reporter, StepStatus};
use agentsadm_plan::{Gate, Operation, Plan, RolloutPolicy};
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::testkit::{ExampleDc, request};
use agentsadm_types::ids::ServerUuid;

/// Each step's start and end, at the paused clock's seconds since
/// execution began (after the run took the lock): `"3 start cn-agent"`,
/// `"13 done cn-agent ok"`.
pub(crate) struct Timeline {
    began: Mutex<Option<tokio::time::Instant>>,
    lines: Mutex<Vec<String>>,
}

impl Timeline {
    pub(crate) fn new() -> Timeline {
        Timeline {
            began: Mutex::new(None),
            lines: Mutex::new(Vec::new()),
        }
    }

    /// The lines by time, and by text within one instant (steps that
    /// start or end together are in no particular order).
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut lines = self.lines.lock().unwrap().clone();
        let at = |l: &String| -> f64 { l.split(' ').next().unwrap().parse().unwrap() };
        lines.sort_by(|a, b| at(a).total_cmp(&at(b)).then_with(|| a.cmp(b)));
        lines
    }
}

impl Reporter for Timeline {
    fn event(&self, event: &ExecEvent<'_>) {
        if let ExecEvent::Started { .. } = event {
            *self.began.lock().unwrap() = Some(tokio::time::Instant::now());
        }
        let Some(began) = *self.began.lock().unwrap() else {
            return;
        };
        let at = began.elapsed().as_secs_f64().round();
        let line = match event {
            ExecEvent::StepStarted { step, .. } => format!("{at} start {}", step.component),
            ExecEvent::StepFinished { step, failure, .. } => format!(
                "{at} done {} {}",
                step.component,
                if failure.is_some() { "failed" } else { "ok" }
            ),
            _ => return,
        };
        self.lines.lock().unwrap().push(line);
    }
}

/// cn001 of a one-CN datacenter, `components` at 2.0.0 planned for it,
/// each install taking 1 s and each `gz health` gate 10 s.
fn setup(components: &[&str]) -> (FakeDc, Plan, ServerUuid) {
    let mut dc = ExampleDc::new(1);
    let targets: Vec<_> = components.iter().map(|c| dc.publish(c, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    let fake = FakeDc::new(dc);
    {
        let mut f = fake.faults();
        f.latency = Duration::from_secs(1);
        f.gate = Duration::from_secs(10);
    }
    let req = request(Operation::Update, components, &["cn001"]);
    let plan = fake.plan(&req, &images, RolloutPolicy::default());
    let cn001 = fake.dc().server_named("cn001");
    assert_eq!(plan.servers().len(), 1, "{plan}");
    assert!(
        plan.servers()[&cn001]
            .steps
            .iter()
            .all(|st| st.gate == Gate::GzHealth),
        "{plan}"
    );
    (fake, plan, cn001)
}

pub(crate) async fn run(fake: &FakeDc, plan: &Plan) -> (ExecReport, Vec<String>, Duration) {
    let timeline = Timeline::new();
    let options = ExecOptions::default();
    let report = crate::sim_common::run_yes(fake, plan, &options, &timeline).await;
    let took = report.elapsed;
    (report, timeline.lines(), took)
}

/// Four agents, 1 s installs, 10 s gates: config-agent (core-second)
/// installs, then vm-agent and net-agent while its gate runs, then
/// cn-agent, last, while theirs run: 13 s, where gates one after the
/// other took 44 s (main: 4 x (1 + 10)).
#[tokio::test(start_paused = true)]
async fn four_agents_gates_overlap_the_next_installs() {
    let (fake, plan, cn001) = setup(&["config-agent", "vm-agent", "net-agent", "cn-agent"]);
    let (report, lines, took) = run(&fake, &plan).await;
    assert!(report.all_succeeded(), "{}", report.render(&plan));
    assert_eq!(
        lines,
        [
            "0 start config-agent",
            "1 start net-agent",
            "1 start vm-agent",
            "2 start cn-agent",
            "11 done config-agent ok",
            "12 done net-agent ok",
            "12 done vm-agent ok",
            "13 done cn-agent ok",
        ],
        "{lines:#?}"
    );
    assert!(
        took >= Duration::from_secs(13) && took < Duration::from_secs(14),
        "{took:?}"
    );
    let o = &report.servers[&cn001];
    assert_eq!(o.gates.len(), 4);
    for g in &o.gates {
        assert!(g.passed, "{g:?}");
        assert_eq!(g.elapsed, Some(Duration::from_secs(10)), "{g:?}");
    }
    // The server runs every new image.
    let dc = fake.dc();
    for (c, target) in plan.targets() {
        let now = dc.installed(cn001, c).and_then(|a| a.image_uuid);
        assert_eq!(now, Some(target.uuid), "{c}");
    }
}

/// agents_core is core-first: what follows it needs it working, so its
/// gate is waited for before vm-agent installs (1 + 10 + 1 + 10 s).
#[tokio::test(start_paused = true)]
async fn a_core_first_components_gate_is_waited_for() {
    let (fake, plan, _) = setup(&["agents_core", "vm-agent"]);
    let (report, lines, _) = run(&fake, &plan).await;
    assert!(report.all_succeeded(), "{}", report.render(&plan));
    assert_eq!(
        lines,
        [
            "0 start agents_core",
            "11 done agents_core ok",
            "11 start vm-agent",
            "22 done vm-agent ok",
        ]
    );
}

/// vm-agent's install fails at 2 s: cn-agent's batch never starts, the
/// gates already running (config-agent's, net-agent's) finish and pass.
#[tokio::test(start_paused = true)]
async fn the_first_failure_stops_the_batches_not_started_and_the_running_gates_finish() {
    let (fake, plan, cn001) = setup(&["config-agent", "vm-agent", "net-agent", "cn-agent"]);
    fake.faults().fail.insert(
        cn001,
        (
            Some("vm-agent".into()),
            "AgentInstall error: disk full".into(),
        ),
    );
    let (report, lines, _) = run(&fake, &plan).await;
    assert_eq!(
        lines,
        [
            "0 start config-agent",
            "1 start net-agent",
            "1 start vm-agent",
            "2 done vm-agent failed",
            "11 done config-agent ok",
            "12 done net-agent ok",
        ],
        "{lines:#?}"
    );
    let o = &report.servers[&cn001];
    assert_eq!(
        o.failure.as_ref().unwrap().component.as_deref(),
        Some("vm-agent")
    );
    let status: Vec<(&str, StepStatus)> = o
        .steps
        .iter()
        .map(|s| (s.component.as_str(), s.status))
        .collect();
    assert_eq!(
        status,
        [
            ("config-agent", StepStatus::Done),
            ("net-agent", StepStatus::Done),
            ("vm-agent", StepStatus::Failed),
            ("cn-agent", StepStatus::NotRun),
        ]
    );
    assert!(o.revert.is_none());
}

/// config-agent's new build goes to maintenance: its gate fails at 11 s,
/// after the others started. Only config-agent is reverted (the image
/// before reinstalled, its SAPI instance naming it again); vm-agent,
/// net-agent and cn-agent keep their new images and records.
#[tokio::test(start_paused = true)]
async fn a_failing_gate_reverts_only_its_own_component() {
    let components = ["config-agent", "vm-agent", "net-agent", "cn-agent"];
    let (fake, plan, cn001) = setup(&components);
    fake.faults().unhealthy.insert(cn001, "config-agent".into());
    let (intent_before, _) = fake.snapshot();
    let (report, lines, _) = run(&fake, &plan).await;
    assert_eq!(
        lines,
        [
            "0 start config-agent",
            "1 start net-agent",
            "1 start vm-agent",
            "2 start cn-agent",
            // Unhealthy at 11 s; its revert (a 1 s reinstall) waits for
            // no install to run on the server, which is already so.
            "12 done config-agent failed",
            "12 done net-agent ok",
            "12 done vm-agent ok",
            "13 done cn-agent ok",
        ],
        "{lines:#?}"
    );
    let o = &report.servers[&cn001];
    let f = o.failure.as_ref().unwrap();
    assert_eq!(f.stage.to_string(), "unhealthy");
    assert!(f.message.contains("maintenance"), "{}", f.message);
    assert!(f.message.contains("reverted: image"), "{}", f.message);
    let revert = o.revert.as_ref().expect("reverted");
    assert_eq!(revert.component, "config-agent");
    assert!(revert.sapi && revert.error.is_none(), "{revert:?}");
    assert!(o.also_reverted.is_empty());
    let gates: Vec<(&str, bool)> = o
        .gates
        .iter()
        .map(|g| (g.component.as_str(), g.passed))
        .collect();
    assert_eq!(
        gates,
        [
            ("config-agent", false),
            ("net-agent", true),
            ("vm-agent", true),
            ("cn-agent", true)
        ]
    );
    // The server: config-agent as before, the others at their target.
    let (intent_after, reality) = fake.snapshot();
    let sp = &plan.servers()[&cn001];
    for st in &sp.steps {
        let now = reality.servers[&cn001]
            .components
            .get(&st.component)
            .and_then(|c| c.image);
        let before = st.expect_current().flatten();
        let target = st.action.target().map(|t| t.uuid);
        let want = if st.component == "config-agent" {
            before
        } else {
            target
        };
        assert_eq!(now, want, "{}", st.component);
        // SAPI names what runs: config-agent's record as before.
        let record = |intent: &agentsadm_plan::intent::Intent| {
            intent.intended_image(&cn001, st.component.as_str())
        };
        if st.component == "config-agent" {
            assert_eq!(record(&intent_after), record(&intent_before));
        } else {
            assert_eq!(record(&intent_after), target, "{}", st.component);
        }
    }
}
