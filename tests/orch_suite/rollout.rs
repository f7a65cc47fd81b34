//! Safe rollouts on the fake datacenter (issue 14): the failure budget,
//! the canary wave, rack-aware batches and a lost lock, each checked from
//! the executor's start/finish events, with tokio's paused clock, through
//! the run with a scripted operator.

use std::collections::BTreeMap;
use std::time::Duration;

use agentsadm_orchestrate::execute::ExecOptions;

use agentsadm_orchestrate::execute::FailureBudget;

use agentsadm_orchestrate::execute::default_canary;

use agentsadm_orchestrate::execute::pick_canaries;
use agentsadm_orchestrate::report::ExecEvent;
use agentsadm_orchestrate::report::ExecReport;
use agentsadm_orchestrate::report::Halted;
use agentsadm_orchestrate::report::Reporter;
use agentsadm_orchestrate::run::RunSettings;
use agentsadm_plan::Operation;
use agentsadm_plan::Plan;
use agentsadm_plan::Request;
use agentsadm_plan::RolloutPolicy;
use agentsadm_sim::fake::FakeDc;
use agentsadm_sim::recording::RecordingReporter;
use agentsadm_sim::testkit::ExampleDc;
use agentsadm_sim::testkit::request;

use crate::sim_common::Scripted;

/// `n` CNs with vm-agent 2.0.0 published, and the update plan for all.
fn setup(n: usize, racks: impl Fn(usize) -> Option<String>) -> (FakeDc, Request, Plan) {
    let mut dc = ExampleDc::new(n);
    let target = dc.publish("vm-agent", "2.0.0");
    for i in 1..=n {
        if let Some(r) = racks(i) {
            let uuid = dc.server_named(&format!("cn{i:03}"));
            dc.set_rack(uuid, &r);
        }
    }
    let fake = FakeDc::new(dc);
    fake.faults().latency = Duration::from_secs(1);
    let req = request(Operation::Update, &["vm-agent"], &[]);
    let images = fake.dc().images_with_targets(&[target]);
    let p = plan_on(&fake, &req, &images);
    (fake, req, p)
}

fn plan_on(fake: &FakeDc, req: &Request, images: &agentsadm_plan::ResolvedImages) -> Plan {
    plan_with(fake, req, images, RolloutPolicy::default())
}

/// The plan with `rollout` (concurrency, canary, budget) decided in it.
fn plan_with(
    fake: &FakeDc,
    req: &Request,
    images: &agentsadm_plan::ResolvedImages,
    rollout: RolloutPolicy,
) -> Plan {
    fake.plan(req, images, rollout)
}

/// The plan `p` again, with the waves `rollout` decides (the planner, not
/// the executor, picks canaries and order).
fn rolled_out(fake: &FakeDc, req: &Request, p: &Plan, rollout: RolloutPolicy) -> Plan {
    let images = fake
        .dc()
        .images_with_targets(&p.targets().values().cloned().collect::<Vec<_>>());
    plan_with(fake, req, &images, rollout)
}

fn fail(fake: &FakeDc, hostname: &str) {
    let uuid = fake.dc().server_named(hostname);
    fake.faults().fail.insert(
        uuid,
        (
            None,
            "svc:/smartdc/agent/vm-agent:default maintenance".into(),
        ),
    );
}

/// `p` carried out through the run, as the binary does: with `-y` when
/// `operator` is a script, else after its answer at the terminal.
async fn run(
    fake: &FakeDc,
    p: &Plan,
    options: &ExecOptions,
    operator: &Scripted,
) -> (ExecReport, Vec<String>) {
    let reporter = RecordingReporter::default();
    let report = run_reporting(fake, p, options, operator, &reporter).await;
    (report, reporter.lines())
}

async fn run_reporting(
    fake: &FakeDc,
    p: &Plan,
    options: &ExecOptions,
    operator: &Scripted,
    reporter: &dyn Reporter,
) -> ExecReport {
    let catalog = fake.dc().catalog.clone();
    let settings = RunSettings {
        yes: !operator.interactive,
        options: options.clone(),
        ..RunSettings::default()
    };
    crate::sim_common::executed(
        crate::sim_common::run_on(
            fake,
            &catalog,
            p,
            &settings,
            reporter,
            operator,
            std::future::pending(),
        )
        .await,
    )
}

/// Whether the operator was asked about the canary wave.
fn asked(operator: &Scripted) -> bool {
    !operator.canaries.lock().unwrap().is_empty()
}

/// Passes events on to `inner`; once `hostname` finished, a colleague
/// breaks the datacenter lock in `fake`.
struct BreaksTheLockAfter<'a> {
    fake: &'a FakeDc,
    hostname: &'a str,
    inner: RecordingReporter,
}

impl Reporter for BreaksTheLockAfter<'_> {
    fn event(&self, event: &ExecEvent<'_>) {
        self.inner.event(event);
        if let ExecEvent::ServerFinished { outcome, .. } = event
            && outcome.hostname == self.hostname
        {
            crate::sim_common::break_lock(self.fake);
        }
    }
}

fn starts(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("server-start "))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn budget_halts_at_n_plus_one() {
    let (fake, req, p) = setup(60, |_| None);
    for i in 1..=10 {
        fail(&fake, &format!("cn{i:03}"));
    }
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            concurrency: 1,
            max_failures: Some(FailureBudget::Count(3)),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    // Servers run one at a time: the fourth failure halts the run, and the
    // fourth server is the last to start.
    assert_eq!(starts(&lines), ["cn001", "cn002", "cn003", "cn004"]);
    let failed = lines.iter().filter(|l| l.ends_with(" failed")).count();
    assert_eq!(failed, 4 + 4, "{lines:?}"); // step-done and server-done
    assert_eq!(
        report.halted,
        Some(Halted::Budget {
            failures: 4,
            budget: 3
        })
    );
    assert_eq!(report.budget, Some(3));
    assert_eq!(report.counts().not_started, p.servers().len() - 4);
    assert_eq!(report.exit_status(&p), 2);
    let text = report.render(&p);
    assert!(
        text.contains("halted after 4 failures (budget 3)")
            && text.contains("run the same command again"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["halted"]["reason"], "budget");
    assert_eq!(json["budget"], 3);
}

#[tokio::test(start_paused = true)]
async fn budget_lets_servers_in_flight_finish() {
    let (fake, req, p) = setup(60, |_| None);
    for i in 1..=10 {
        fail(&fake, &format!("cn{i:03}"));
    }
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            concurrency: 5,
            max_failures: Some(FailureBudget::Percent(5)),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    // 5% of 61 is 3. The first five fail together: the first three
    // failures each let a new server start (three more failing servers),
    // the fourth halts the run; the servers in flight still finish.
    assert_eq!(starts(&lines).len(), 8, "{lines:?}");
    assert_eq!(report.counts().failed, 8);
    assert_eq!(
        report.halted,
        Some(Halted::Budget {
            failures: 4,
            budget: 3
        })
    );
}

#[test]
fn budget_parses_counts_and_percentages() {
    assert_eq!("7".parse(), Ok(FailureBudget::Count(7)));
    assert_eq!("5%".parse(), Ok(FailureBudget::Percent(5)));
    assert!("x%".parse::<FailureBudget>().is_err());
    assert!("101%".parse::<FailureBudget>().is_err());
    assert_eq!(FailureBudget::DEFAULT.limit(140), 7);
    assert_eq!(FailureBudget::DEFAULT.limit(10), 1);
    assert_eq!(FailureBudget::Count(0).limit(10), 1);
    assert_eq!(default_canary(20), 0);
    assert_eq!(default_canary(21), 1);
}

#[tokio::test(start_paused = true)]
async fn canary_failure_stops_at_the_canary() {
    let (fake, req, p) = setup(30, |_| None);
    fail(&fake, "cn001");
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            canary: Some(1),
            max_failures: Some(FailureBudget::DEFAULT),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let operator = Scripted::yes();
    let (report, lines) = run(&fake, &p, &options, &operator).await;
    assert_eq!(starts(&lines), ["cn001"]);
    assert!(!asked(&operator));
    let canary = report.canary.as_ref().unwrap();
    assert_eq!(
        (canary.servers.as_slice(), canary.passed),
        (&["cn001".to_string()][..], false)
    );
    assert_eq!(
        report.halted,
        Some(Halted::Canary {
            failed: vec!["cn001".into()]
        })
    );
    // No other server was touched.
    assert!(fake.steps_run().is_empty());
    assert_eq!(report.counts().not_started, p.servers().len() - 1);
    assert_eq!(report.exit_status(&p), 2);
    assert!(report.render(&p).contains("canary failed on cn001"));
}

#[tokio::test(start_paused = true)]
async fn canary_passes_then_the_rest_follow_and_replan_is_empty() {
    let (fake, req, p) = setup(30, |_| None);
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            canary: Some(1),
            max_failures: Some(FailureBudget::DEFAULT),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let operator = Scripted::yes();
    let (report, lines) = run(&fake, &p, &options, &operator).await;
    assert!(asked(&operator));
    // The canary finishes before any other server starts.
    let first_done = lines
        .iter()
        .position(|l| l.starts_with("server-done"))
        .unwrap();
    let second_start = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("server-start"))
        .nth(1)
        .unwrap()
        .0;
    assert!(first_done < second_start, "{lines:?}");
    assert!(report.all_succeeded(), "{}", report.render(&p));
    assert!(report.canary.as_ref().unwrap().passed);
    assert_eq!(report.halted, None);
    // One canary wave of 1 s, then 30 servers 20 at a time: 2 s.
    assert_eq!(report.elapsed.as_secs(), 3);
    let images = fake.dc().known_images();
    assert!(plan_on(&fake, &req, &images).servers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_declined_canary_starts_nothing_else() {
    let (fake, req, p) = setup(30, |_| None);
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            canary: Some(1),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    // At a terminal: yes to the plan, no after the canary wave.
    let operator = Scripted::at_terminal(&[true]).canary(false);
    let (report, lines) = run(&fake, &p, &options, &operator).await;
    assert!(asked(&operator));
    assert_eq!(starts(&lines).len(), 1);
    assert_eq!(report.halted, Some(Halted::Declined));
    assert_eq!(report.exit_status(&p), 2);
    // The service default the plan moved is put back (new servers must
    // not get the build the operator declined), and the summary says what
    // was put back and that the servers not started were not written.
    let changes = p.service_changes();
    assert!(!changes.is_empty());
    assert_eq!(report.service_changes_reverted, changes.len());
    for c in changes {
        let now = fake
            .dc()
            .services
            .iter()
            .find(|s| s.uuid == c.service)
            .and_then(|s| s.image_uuid());
        assert_eq!(now, c.from, "{}", c.component);
    }
    let text = report.render(&p);
    assert!(
        text.contains("Intent put back after the halt: the default image of 1 service"),
        "{text}"
    );
    assert!(
        text.contains("SAPI intent of the 30 servers not started is as it was"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn canaries_come_from_different_racks() {
    let (fake, req, p) = setup(40, |i| Some(format!("rack-{}", (i - 1) / 10)));
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            canary: Some(3),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    assert_eq!(&starts(&lines)[..3], ["cn001", "cn011", "cn021"]);
    assert_eq!(report.canary.unwrap().servers, ["cn001", "cn011", "cn021"]);
    assert_eq!(pick_canaries(&[None, None, Some("a")], 2), [0, 2]);
    assert_eq!(pick_canaries(&[None, None, None], 2), [0, 1]);
}

#[tokio::test(start_paused = true)]
async fn rack_limit_never_exceeded() {
    // 80 CNs, 40 per rack except the last 8 (no rack); random latencies.
    let rack_of = |i: usize| (i <= 72).then(|| format!("rack-{}", (i - 1) / 40));
    let (fake, req, p) = setup(80, rack_of);
    for i in 1..=80 {
        let uuid = fake.dc().server_named(&format!("cn{i:03}"));
        fake.faults()
            .slow
            .insert(uuid, 1.0 + (i * 7 % 11) as f64 / 3.0);
    }
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            concurrency: 20,
            max_per_rack: Some(3),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    assert!(report.all_succeeded(), "{}", report.render(&p));
    let rack = |host: &str| {
        host.strip_prefix("cn")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(rack_of)
    };
    let mut in_flight: BTreeMap<String, usize> = BTreeMap::new();
    let mut peak: BTreeMap<String, usize> = BTreeMap::new();
    let (mut unracked, mut unracked_peak) = (0usize, 0usize);
    for l in &lines {
        if let Some(h) = l.strip_prefix("server-start ") {
            match rack(h) {
                Some(r) => {
                    let n = in_flight.entry(r.clone()).or_default();
                    *n += 1;
                    let pk = peak.entry(r).or_default();
                    *pk = (*pk).max(*n);
                }
                None => {
                    unracked += 1;
                    unracked_peak = unracked_peak.max(unracked);
                }
            }
        } else if let Some(rest) = l.strip_prefix("server-done ") {
            let h = rest.split(' ').next().unwrap();
            match rack(h) {
                Some(r) => *in_flight.get_mut(&r).unwrap() -= 1,
                None => unracked -= 1,
            }
        }
    }
    assert_eq!(peak.len(), 2);
    assert!(peak.values().all(|&n| n == 3), "{peak:?}");
    // Servers without a rack are not held back by the limit.
    assert!(unracked_peak > 3, "{unracked_peak}");
    let images = fake.dc().known_images();
    assert!(plan_on(&fake, &req, &images).servers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_broken_lock_stops_new_starts() {
    let (fake, req, p) = setup(10, |_| None);
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            concurrency: 2,
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    // cn002 takes 10 s: cn003 runs while it does, and once cn003 is done a
    // colleague breaks the lock (`--break-lock`: a held record of a later
    // generation). The next start confirms the lock, finds it lost and
    // starts nothing more; cn002, running, finishes.
    let cn2 = fake.dc().server_named("cn002");
    fake.faults().slow.insert(cn2, 10.0);
    let breaks = BreaksTheLockAfter {
        fake: &fake,
        hostname: "cn003",
        inner: RecordingReporter::default(),
    };
    let report = run_reporting(&fake, &p, &options, &Scripted::yes(), &breaks).await;
    let lines = breaks.inner.lines();
    assert_eq!(starts(&lines).len(), 3);
    assert_eq!(report.halted, Some(Halted::LockLost));
    assert_eq!(report.counts().succeeded, 3);
    assert_eq!(report.exit_status(&p), 2);
    assert!(report.render(&p).contains("lock was lost"));
}

#[tokio::test(start_paused = true)]
async fn unhealthy_canary_reverted_rollout_halted_rest_untouched_sapi_unchanged() {
    let (fake, req, p) = setup(30, |_| None);
    let cn001 = fake.dc().server_named("cn001");
    fake.faults().unhealthy.insert(cn001, "vm-agent".into());
    let (sapi_before, reality_before) = fake.snapshot();
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            canary: Some(1),
            max_failures: Some(FailureBudget::DEFAULT),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    // Caught at the canary; nothing else started.
    assert_eq!(starts(&lines), ["cn001"]);
    assert_eq!(
        report.halted,
        Some(Halted::Canary {
            failed: vec!["cn001".into()]
        })
    );
    let o = &report.servers[&cn001];
    let f = o.failure.as_ref().unwrap();
    assert_eq!(f.stage, "unhealthy");
    assert!(f.message.contains("maintenance"), "{}", f.message);
    assert_eq!(o.gates.len(), 1);
    assert!(!o.gates[0].passed);
    let revert = o.revert.as_ref().expect("reverted");
    let old = p.servers()[&cn001].steps[0].expect_current().flatten();
    assert_eq!(revert.image, old);
    assert!(revert.sapi && revert.error.is_none(), "{revert:?}");
    // The server runs its previous image; SAPI (instances and service
    // defaults) and every other server are as before.
    let (sapi_after, reality_after) = fake.snapshot();
    assert_eq!(reality_after, reality_before);
    assert_eq!(sapi_after, sapi_before);
    assert_eq!(report.exit_status(&p), 2);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["canary"]["passed"], false);
    assert_eq!(json["halted"]["reason"], "canary");
    let server = &json["servers"][cn001.to_string()];
    assert_eq!(server["gates"][0]["gate"], "gz-health");
    assert_eq!(server["gates"][0]["passed"], false);
    assert_eq!(server["revert"]["sapi"], true);
    // The next run plans the same change again (nothing claims it done).
    let images = fake
        .dc()
        .images_with_targets(&[p.targets()["vm-agent"].clone()]);
    assert_eq!(
        plan_on(&fake, &req, &images).servers().len(),
        p.servers().len()
    );
}

#[tokio::test(start_paused = true)]
async fn unhealthy_servers_count_against_the_budget() {
    let (fake, req, p) = setup(60, |_| None);
    for i in 1..=10 {
        let uuid = fake.dc().server_named(&format!("cn{i:03}"));
        fake.faults().unhealthy.insert(uuid, "vm-agent".into());
    }
    let p = rolled_out(
        &fake,
        &req,
        &p,
        RolloutPolicy {
            concurrency: 1,
            max_failures: Some(FailureBudget::Count(2)),
            ..Default::default()
        },
    );
    let options = ExecOptions::default();
    let (report, lines) = run(&fake, &p, &options, &Scripted::yes()).await;
    assert_eq!(starts(&lines), ["cn001", "cn002", "cn003"]);
    assert_eq!(
        report.halted,
        Some(Halted::Budget {
            failures: 3,
            budget: 2
        })
    );
    assert!(
        report
            .servers
            .values()
            .filter(|o| o.revert.is_some())
            .count()
            == 3
    );
}
