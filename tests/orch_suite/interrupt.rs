//! Interruption tells the truth (issue 15): the servers in flight are named
//! with their CNAPI task ids, a terminal run keeps waiting for them until a
//! second interrupt, servers that finish while it waits are counted as
//! they ended (not "interrupted"), and task ids reach `--json`. A step that
//! runs into the task timeout names its task. Fake datacenter, paused clock,
//! through the run with a scripted operator.

use std::time::Duration;

use agentsadm_orchestrate::execute::ExecOptions;

use crate::sim_common::Scripted;
use agentsadm_orchestrate::report::ExecEvent;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::InFlight;
use agentsadm_orchestrate::report::Reporter;
use agentsadm_orchestrate::report::ServerStatus;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::PlanOptions;
use agentsadm_plan::PlanningInput;
use agentsadm_plan::TransportMode;
use agentsadm_plan::plan;
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::request;
use std::sync::Mutex;

/// `n` CNs, vm-agent published at 2.0.0, and the plan to update it.
fn update_plan(n: usize) -> (FakeDc, Plan) {
    update_plan_with(n, 20)
}

/// `n` CNs, vm-agent 2.0.0, the update plan `concurrency` servers at once.
fn update_plan_with(n: usize, concurrency: usize) -> (FakeDc, Plan) {
    let mut dc = ExampleDc::new(n);
    let target = dc.publish("vm-agent", "2.0.0");
    let fake = FakeDc::new(dc);
    let images = fake.dc().images_with_targets(&[target]);
    let (intent, reality) = fake.snapshot();
    let catalog = fake.dc().catalog.clone();
    let p = plan(&PlanningInput {
        catalog: &catalog,
        intent: &intent,
        reality: &reality,
        request: &request(Operation::Update, &["vm-agent"], &[]),
        options: PlanOptions {
            transport: TransportMode::Auto,
            ignore_holds: false,
            rollout: agentsadm_plan::RolloutPolicy {
                concurrency,
                ..Default::default()
            },
        },
        images: &images,
        durations: None,
    })
    .expect("plan");
    (fake, p)
}

/// Keeps the interrupt events' servers in flight.
#[derive(Default)]
struct Interrupts {
    seen: Mutex<Vec<(Vec<InFlight>, bool)>>,
    stopped: Mutex<Vec<InFlight>>,
}

impl Reporter for Interrupts {
    fn event(&self, event: &ExecEvent<'_>) {
        match event {
            ExecEvent::Interrupted { in_flight, waiting } => {
                self.seen
                    .lock()
                    .unwrap()
                    .push((in_flight.to_vec(), *waiting));
            }
            ExecEvent::StoppedWaiting { in_flight } => {
                *self.stopped.lock().unwrap() = in_flight.to_vec();
            }
            _ => {}
        }
    }
}

/// `p` carried out with `-y` through the run, interrupted `interrupt_at`
/// after execution began, `operator` deciding whether to keep waiting.
async fn run_interrupted(
    fake: &FakeDc,
    p: &Plan,
    options: &ExecOptions,
    interrupt_at: Duration,
    operator: &Scripted,
    reporter: &Interrupts,
) -> ExecReport {
    let catalog = fake.dc().catalog.clone();
    crate::sim_common::executed(
        crate::sim_common::run_on(
            fake,
            &catalog,
            p,
            &crate::sim_common::yes_with(options),
            reporter,
            operator,
            crate::sim_common::interrupt_after(interrupt_at),
        )
        .await,
    )
}

#[tokio::test(start_paused = true)]
async fn servers_that_finish_while_waiting_are_not_called_interrupted() {
    // Two at a time, 1 s each: at 2.5 s cn005 and cn006 are in flight.
    let (fake, p) = update_plan_with(9, 2);
    fake.faults().latency = Duration::from_secs(1);
    let options = ExecOptions::default();
    let reporter = Interrupts::default();
    // At a terminal: keeps waiting until they finish.
    let operator = Scripted::yes().keeps_waiting(None);
    let report = run_interrupted(
        &fake,
        &p,
        &options,
        Duration::from_millis(2500),
        &operator,
        &reporter,
    )
    .await;

    let seen = reporter.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (in_flight, waiting) = &seen[0];
    assert!(*waiting);
    assert_eq!(in_flight.len(), 2, "{in_flight:?}");
    for f in in_flight {
        assert_eq!(f.tasks.len(), 1, "{f:?}");
        assert_eq!(f.tasks[0].component, "vm-agent");
        assert!(
            f.describe()
                .contains(&format!("vm-agent task {}", f.tasks[0].task))
        );
    }

    // They finished while the run waited: succeeded, and no new server
    // was started after the interrupt.
    assert!(report.interrupted);
    let c = report.counts();
    assert_eq!(
        (c.succeeded, c.interrupted, c.not_started),
        (6, 0, 4),
        "{}",
        report.render(&p)
    );
    assert_eq!(report.elapsed, Duration::from_secs(3));
    let text = report.render(&p);
    assert!(text.contains("(4 not started)"), "{text}");
    assert!(!text.contains("interrupted ("), "{text}");
    assert!(!text.contains("Failed:"), "{text}");
    assert!(!text.contains("left running"), "{text}");
    assert_eq!(report.exit_status(&p), 2);
}

#[tokio::test(start_paused = true)]
async fn a_second_interrupt_stops_waiting_and_names_the_tasks_left_running() {
    let (fake, p) = update_plan_with(4, 4);
    let cn2 = fake.dc().server_named("cn002");
    let cn3 = fake.dc().server_named("cn003");
    fake.faults().hang.insert(cn2);
    fake.faults().hang.insert(cn3);
    fake.faults().latency = Duration::from_secs(1);
    let options = ExecOptions::default();
    let reporter = Interrupts::default();
    // At a terminal: a second Ctrl-C 5 s after the first.
    let operator = Scripted::yes().keeps_waiting(Some(Duration::from_secs(5)));
    let report = run_interrupted(
        &fake,
        &p,
        &options,
        Duration::from_secs(2),
        &operator,
        &reporter,
    )
    .await;

    let stopped = reporter.stopped.lock().unwrap().clone();
    let names: Vec<&str> = stopped.iter().map(|f| f.hostname.as_str()).collect();
    assert_eq!(names, ["cn002", "cn003"]);
    assert_eq!(report.elapsed, Duration::from_secs(7));
    let c = report.counts();
    assert_eq!((c.succeeded, c.interrupted, c.not_started), (3, 2, 0));

    let o = &report.servers[&cn2];
    assert_eq!(o.status, ServerStatus::Interrupted);
    assert_eq!(o.tasks.len(), 1);
    let task = o.tasks[0].task;
    let why = &o.failure.as_ref().unwrap().message;
    assert!(
        why.contains(&format!("vm-agent task {task}")) && why.contains("may still complete"),
        "{why}"
    );
    let text = report.render(&p);
    assert!(text.contains("(2 left running)"), "{text}");
    assert!(
        text.contains("they may still complete") && text.contains(&task.to_string()),
        "{text}"
    );

    // --json: every server's result carries its task ids.
    let doc = serde_json::to_value(&report).unwrap();
    let servers = doc["servers"].as_object().unwrap();
    assert_eq!(
        servers[&cn2.to_string()]["tasks"][0]["task"],
        task.to_string()
    );
    assert_eq!(
        servers[&cn2.to_string()]["tasks"][0]["component"],
        "vm-agent"
    );
    for (_, s) in servers {
        assert_eq!(s["tasks"].as_array().map(Vec::len), Some(1), "{s}");
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_terminal_the_first_interrupt_stops_waiting() {
    let (fake, p) = update_plan(4);
    let cn2 = fake.dc().server_named("cn002");
    fake.faults().hang.insert(cn2);
    fake.faults().latency = Duration::from_secs(1);
    let reporter = Interrupts::default();
    let report = run_interrupted(
        &fake,
        &p,
        &ExecOptions::default(),
        Duration::from_secs(2),
        &Scripted::yes(),
        &reporter,
    )
    .await;
    let seen = reporter.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].1, "not waiting");
    assert_eq!(seen[0].0[0].hostname, "cn002");
    assert_eq!(report.elapsed, Duration::from_secs(2));
    assert_eq!(report.servers[&cn2].status, ServerStatus::Interrupted);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_step_names_its_task() {
    let (fake, p) = update_plan(2);
    let cn1 = fake.dc().server_named("cn001");
    fake.faults().hang.insert(cn1);
    let options = ExecOptions {
        task_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let report = crate::sim_common::run_yes(&fake, &p, &options, &Interrupts::default()).await;
    let o = &report.servers[&cn1];
    assert_eq!(o.status, ServerStatus::TimedOut);
    let task = o.tasks[0].task;
    let f = o.failure.as_ref().unwrap();
    assert_eq!(f.stage, "timeout");
    assert!(
        f.message
            .contains(&format!("CNAPI task {task} may still be running")),
        "{}",
        f.message
    );
}
