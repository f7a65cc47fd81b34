//! One server's execute-carried installs in one `gz install A B` (issue
//! 35), on the fake datacenter with tokio's paused clock: the fake models
//! the installer's lock (one run per server at a time) and its gate inside
//! each run, so separate executes gate one after the other and one shared
//! run gates its members at once. Counts of executes and the paused
//! clock's seconds only (no wall-clock assertion).

use std::time::Duration;

use agentsadm_orchestrate::report::StepStatus;
use agentsadm_plan::{Gate, Operation, Plan, RolloutPolicy, TransportKind};
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::testkit::{ExampleDc, request};
use agentsadm_types::ids::ServerUuid;

use crate::gates::run;

/// The headnode of a one-CN datacenter with dockerlogger too and its
/// agentsadm at `agentsadm`, `components` at 2.0.0 planned for it: each
/// run 1 s of install plus a 10 s installer gate, cn-agent's `gz health`
/// gate 10 s.
fn setup(agentsadm: &str, components: &[&str]) -> (FakeDc, Plan, ServerUuid) {
    let mut dc = ExampleDc::new(1);
    let hn = dc.server_named("headnode");
    dc.install(hn, "dockerlogger", "1.0.0");
    dc.install(hn, "agentsadm", agentsadm);
    let targets: Vec<_> = components.iter().map(|c| dc.publish(c, "2.0.0")).collect();
    let images = dc.images_with_targets(&targets);
    let fake = FakeDc::new(dc);
    {
        let mut f = fake.faults();
        f.latency = Duration::from_secs(1);
        f.gate = Duration::from_secs(10);
        f.installer_gate = Duration::from_secs(10);
        f.one_run_per_server = true;
    }
    let req = request(Operation::Update, components, &["headnode"]);
    let plan = fake.plan(&req, &images, RolloutPolicy::default());
    assert_eq!(plan.servers().len(), 1, "{plan}");
    (fake, plan, hn)
}

/// What went through execute on `server`: each request's components.
fn executes(fake: &FakeDc, server: ServerUuid) -> Vec<Vec<String>> {
    fake.executes()
        .into_iter()
        .filter(|(s, _)| *s == server)
        .map(|(_, mut c)| {
            c.sort();
            c
        })
        .collect()
}

/// sdcadm and dockerlogger (one transient service each, gated in the
/// installer) in one execute: 11 s, one gate. A 0.2.0 agentsadm, which
/// does not parse `--expect`, gets one execute each: they queue on the
/// server's lock, 22 s, two gates one after the other.
#[tokio::test(start_paused = true)]
async fn a_headnode_update_of_sdcadm_and_dockerlogger_takes_one_gate() {
    let (fake, plan, hn) = setup("0.3.0", &["sdcadm", "dockerlogger"]);
    let sp = &plan.servers()[&hn];
    assert!(
        sp.steps
            .iter()
            .all(|st| st.transport == TransportKind::Execute && st.gate == Gate::Installer),
        "{plan}"
    );
    assert_eq!(sp.execute_groups().len(), 1, "{plan}");
    let (report, lines, took) = run(&fake, &plan).await;
    assert!(report.all_succeeded(), "{}", report.render(&plan));
    assert_eq!(
        lines,
        [
            "0 start dockerlogger",
            "0 start sdcadm",
            "11 done dockerlogger ok",
            "11 done sdcadm ok",
        ],
        "{lines:#?}"
    );
    assert!(took < Duration::from_secs(12), "{took:?}");
    assert_eq!(executes(&fake, hn), [vec!["dockerlogger", "sdcadm"]]);

    let (fake, plan, hn) = setup("0.2.0", &["sdcadm", "dockerlogger"]);
    assert!(plan.servers()[&hn].execute_groups().is_empty(), "{plan}");
    let (report, _, took) = run(&fake, &plan).await;
    assert!(report.all_succeeded(), "{}", report.render(&plan));
    assert!(took >= Duration::from_secs(22), "{took:?}");
    assert_eq!(executes(&fake, hn).len(), 2);
}

/// dockerlogger's new build goes to maintenance in the shared run: the
/// installer rolls back only dockerlogger. Its step fails (unhealthy) and
/// its SAPI record names the image before again; sdcadm is recorded
/// installed at its target, and the server runs it.
#[tokio::test(start_paused = true)]
async fn a_failing_gate_in_the_shared_run_reverts_only_its_own_component() {
    let (fake, plan, hn) = setup("0.3.0", &["sdcadm", "dockerlogger"]);
    fake.faults().unhealthy.insert(hn, "dockerlogger".into());
    let (intent_before, _) = fake.snapshot();
    let (report, lines, _) = run(&fake, &plan).await;
    assert_eq!(
        lines,
        [
            "0 start dockerlogger",
            "0 start sdcadm",
            "11 done dockerlogger failed",
            "11 done sdcadm ok",
        ],
        "{lines:#?}"
    );
    assert_eq!(executes(&fake, hn).len(), 1);
    let o = &report.servers[&hn];
    let f = o.failure.as_ref().expect("dockerlogger failed");
    assert_eq!(f.component.as_deref(), Some("dockerlogger"));
    assert_eq!(f.stage.to_string(), "unhealthy");
    let status: Vec<(&str, StepStatus)> = o
        .steps
        .iter()
        .map(|s| (s.component.as_str(), s.status))
        .collect();
    assert_eq!(
        status,
        [
            ("dockerlogger", StepStatus::Failed),
            ("sdcadm", StepStatus::Done)
        ]
    );
    assert_eq!(
        o.revert.as_ref().map(|r| r.component.as_str()),
        Some("dockerlogger")
    );
    assert!(o.also_reverted.is_empty());
    let (intent_after, reality) = fake.snapshot();
    let sp = &plan.servers()[&hn];
    for st in &sp.steps {
        let now = reality.servers[&hn]
            .components
            .get(&st.component)
            .and_then(|c| c.image);
        let record = intent_after.intended_image(&hn, st.component.as_str());
        let target = st.action.target().map(|t| t.uuid);
        if st.component == "dockerlogger" {
            assert_eq!(now, st.expect_current().flatten());
            assert_eq!(record, intent_before.intended_image(&hn, "dockerlogger"));
        } else {
            assert_eq!(now, target, "{}", st.component);
            assert_eq!(record, target, "{}", st.component);
        }
    }
}

/// The plan's order kept: config-agent (core-second) alone first, then
/// the batch (vm-agent's cn-agent task, then gz-tools, sdcadm and
/// dockerlogger in one execute), cn-agent last.
#[tokio::test(start_paused = true)]
async fn the_shared_run_keeps_the_plans_order_and_cn_agent_last() {
    let components = [
        "config-agent",
        "vm-agent",
        "gz-tools",
        "sdcadm",
        "dockerlogger",
        "cn-agent",
    ];
    let (fake, plan, hn) = setup("0.3.0", &components);
    let (report, lines, _) = run(&fake, &plan).await;
    assert!(report.all_succeeded(), "{}", report.render(&plan));
    let started: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(" start "))
        .map(String::as_str)
        .collect();
    assert_eq!(
        started,
        [
            "0 start config-agent",
            "1 start vm-agent",
            "2 start dockerlogger",
            "2 start gz-tools",
            "2 start sdcadm",
            "13 start cn-agent",
        ],
        "{lines:#?}"
    );
    assert_eq!(
        executes(&fake, hn),
        [vec!["dockerlogger", "gz-tools", "sdcadm"]],
        "only the shared run goes through execute"
    );
    let last = lines.last().unwrap();
    assert!(last.ends_with("done cn-agent ok"), "{lines:#?}");
}
