//! Faults are named for what failed (issue 22): when SAPI, CNAPI or IMGAPI
//! stops answering mid-rollout, the run stops starting servers, marks no
//! server failed (those in flight are "unknown", with their task ids), says
//! once which API was lost, releases the lock (trying again while SAPI is
//! down) and exits 2; the same command afterwards converges. SIGTERM and
//! SIGHUP end a rollout of the binary with the same summary and run-log
//! records as Ctrl-C.

use std::process::Stdio;
use std::time::Duration;

use agentsadm_orchestrate::report::{Halted, ServerStatus};
use agentsadm_orchestrate::run::RunOutcome;
use agentsadm_sim::SimDc;
use agentsadm_sim::faults::{LatencySpec, SimApi};
use tokio::io::AsyncBufReadExt;

use crate::one_at_a_time::{Progress, all_on, lock_board, publish, records, settings, sim, update};

/// Six CNs, two at a time, a second per install; `api` stops answering
/// once two servers finished and answers again three seconds later
/// (while the run releases its lock).
async fn outage_mid_rollout(api: SimApi) {
    let dc = sim(6).await;
    let apis = dc.apis();
    let image = publish(&dc, "1.1.0");
    let before = records(&dc).await;
    dc.faults().set_install_latency(LatencySpec::fixed(1000));
    let progress = Progress::default();
    let s = settings(2, false);
    let run = update(&apis, &dc, image, &s, &progress, std::future::pending());
    let outage = async {
        progress.finished(2).await;
        dc.faults().set_api_down(api, true);
        tokio::time::sleep(Duration::from_secs(3)).await;
        dc.faults().set_api_down(api, false);
    };
    let (outcome, ()) = tokio::join!(run, outage);
    let Ok(RunOutcome::Executed { planned, report }) = outcome else {
        panic!("{api:?}: {outcome:?}")
    };
    let text = report.render(&planned);
    let name = api.api().to_string();
    let c = report.counts();
    assert_eq!(
        (c.failed, c.timed_out),
        (0, 0),
        "{name}: no server failed:\n{text}"
    );
    assert!(c.not_started > 0, "{name}: new starts stopped:\n{text}");
    assert_eq!(report.exit_status(&planned), 2, "{text}");
    assert_eq!(
        report.halted,
        Some(Halted::ApiLost { api: name.clone() }),
        "{text}"
    );
    assert_eq!(report.outage.as_ref().map(|o| o.api), Some(api.api()));
    assert_eq!(
        text.matches(&format!("{name} stopped answering")).count(),
        1,
        "said once:\n{text}"
    );
    assert!(
        !text.contains("cannot connect") && !text.contains("connection"),
        "no raw errors:\n{text}"
    );
    // Servers in flight are unknown, named with the tasks they started.
    for o in report
        .servers
        .values()
        .filter(|o| o.status == ServerStatus::Unknown)
    {
        assert!(text.contains(&o.hostname), "{text}");
        assert!(
            o.tasks.iter().all(|t| text.contains(&t.task.to_string())),
            "{text}"
        );
    }
    assert!(
        report.lock_release.is_none(),
        "released after retries: {text}"
    );
    assert!(
        lock_board(&apis).await.entries.is_empty(),
        "{name}: the lock was released"
    );
    // Each server runs the image it had or the new one (SAPI may name the
    // new one where its step did not get to run: the re-run does it);
    // the same command converges.
    let after = records(&dc).await;
    for (host, was) in &before {
        let now = after[host];
        assert!(
            now.1 == was.1 || now.1 == Some(image),
            "{name} {host}: {was:?} -> {now:?}"
        );
        assert!(
            now.0 == was.0 || now.0 == Some(image),
            "{name} {host}: {was:?} -> {now:?}"
        );
    }
    dc.faults().set_install_latency(LatencySpec::default());
    let again = update(
        &apis,
        &dc,
        image,
        &settings(6, false),
        &Progress::default(),
        std::future::pending(),
    )
    .await;
    match again {
        Ok(RunOutcome::Executed { planned, report }) => {
            assert_eq!(
                report.exit_status(&planned),
                0,
                "{}",
                report.render(&planned)
            )
        }
        other => panic!("{name}: the re-run: {other:?}"),
    }
    assert!(all_on(&dc, image).await, "{name}: {:?}", records(&dc).await);
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cnapi_stopping_mid_rollout_is_named_and_fails_no_server() {
    outage_mid_rollout(SimApi::Cnapi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sapi_stopping_mid_rollout_is_named_and_fails_no_server() {
    outage_mid_rollout(SimApi::Sapi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imgapi_stopping_mid_rollout_is_named_and_fails_no_server() {
    outage_mid_rollout(SimApi::Imgapi).await;
}

/// `agentsadm update -y` (one server at a time) gets SIGTERM, then SIGHUP
/// in a second run, once its first server finished: each ends as Ctrl-C
/// does (exit 2, the summary naming the servers not started, the run
/// log's interrupt and summary records), never a silent stop. Servers not
/// started keep their records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sighup_end_a_rollout_as_ctrl_c_does() {
    let dc = sim(4).await;
    dc.faults().set_install_latency(LatencySpec::fixed(1500));
    for (signal, version) in [("TERM", "1.1.0"), ("HUP", "1.2.0")] {
        let image = publish(&dc, version);
        let before = records(&dc).await;
        let state = tempfile::tempdir().unwrap();
        let log = state.path().join("run.log");
        let (code, out, err) = signalled(&dc, &log, image, signal).await;
        assert_eq!(code, 2, "SIG{signal}: {out}\n{err}");
        assert!(
            err.contains("interrupted: no further servers will be started"),
            "{err}"
        );
        assert!(out.contains("not started"), "the summary: {out}");
        let records_logged: Vec<serde_json::Value> = std::fs::read_to_string(&log)
            .expect("run log")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(
            records_logged
                .iter()
                .any(|r| r["msg"].as_str().unwrap_or("").contains("interrupted")),
            "{records_logged:?}"
        );
        assert!(
            records_logged
                .iter()
                .any(|r| r["component"] == "summary" && r["exit_status"] == 2),
            "{records_logged:?}"
        );
        let after = records(&dc).await;
        let untouched = before.iter().filter(|(h, r)| after[*h] == **r).count();
        assert!(untouched > 0, "servers not started keep their records");
        assert!(lock_board(&dc.apis()).await.entries.is_empty());
    }
    dc.shutdown().await;
}

/// Run `update cmon-agent --image image -y -j 1` and send it SIG`signal`
/// once its first server finished.
async fn signalled(
    dc: &SimDc,
    log: &std::path::Path,
    image: agentsadm_types::ids::ImageUuid,
    signal: &str,
) -> (i32, String, String) {
    let urls = dc.urls();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args([
            "update",
            "cmon-agent",
            "--image",
            &image.to_string(),
            "-y",
            "-j",
            "1",
        ])
        .arg("--log-file")
        .arg(log)
        .env("SAPI_URL", &urls.sapi)
        .env("CNAPI_URL", &urls.cnapi)
        .env("IMGAPI_URL", &urls.imgapi)
        .env("UPDATES_URL", &urls.updates)
        .env("AGENTSADM_NO_PROGRESS", "1")
        .env("XDG_STATE_HOME", log.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("agentsadm runs");
    let pid = child.id().expect("a pid").to_string();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut err = String::new();
    let finished_one = async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            err.push_str(&line);
            err.push('\n');
            if line.starts_with("[1/") {
                return true;
            }
        }
        false
    };
    let seen = tokio::time::timeout(Duration::from_secs(60), finished_one)
        .await
        .expect("a first server finishes");
    assert!(seen, "no server finished: {err}");
    let kill = tokio::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(kill.success());
    while let Ok(Some(line)) = stderr.next_line().await {
        err.push_str(&line);
        err.push('\n');
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("agentsadm ends")
        .expect("agentsadm output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        err,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zz_experiment_kinds() {
    use agentsadm_sim::OutageKind;
    let which = std::env::var("KIND").unwrap_or_default();
    let apiname = std::env::var("API").unwrap_or("cnapi".into());
    let kind = OutageKind::ALL
        .into_iter()
        .find(|k| format!("{k:?}") == which)
        .unwrap();
    let api = SimApi::from_key(&apiname).unwrap();
    let dc = sim(6).await;
    let urls = dc.urls();
    let apis = agentsadm_api::Apis::new(
        &urls.imgapi,
        &urls.sapi,
        &urls.cnapi,
        agentsadm_api::ApiConfig {
            timeout: Duration::from_secs(2),
            ..agentsadm_sim::sim_api_config()
        },
    )
    .unwrap();
    let image = publish(&dc, "1.1.0");
    dc.faults().set_install_latency(LatencySpec::fixed(1000));
    let progress = Progress::default();
    let mut s = settings(2, false);
    s.rollout.max_failures = Some(agentsadm_plan::FailureBudget::Count(0));
    let t = std::time::Instant::now();
    let run = update(&apis, &dc, image, &s, &progress, std::future::pending());
    let outage = async {
        progress.finished(2).await;
        dc.faults().set_api_outage(api, Some(kind));
        tokio::time::sleep(Duration::from_secs(3)).await;
        dc.faults().set_api_outage(api, None);
    };
    let (outcome, ()) = tokio::join!(run, outage);
    eprintln!("elapsed {:?}", t.elapsed());
    match outcome {
        Ok(RunOutcome::Executed { planned, report }) => {
            eprintln!(
                "{}\nexit {}",
                report.render(&planned),
                report.exit_status(&planned)
            );
            for o in report.servers.values() {
                eprintln!(
                    "{} {:?} {:?} {:?}",
                    o.hostname, o.status, o.failure, o.tasks
                );
            }
            eprintln!("outliers {:?}", report.outliers);
        }
        other => eprintln!("{other:?}"),
    }
    dc.shutdown().await;
}
