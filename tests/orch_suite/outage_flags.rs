//! The outage pause's bounds are the operator's (issue 30): every command
//! that changes the datacenter takes `--outage-wait DURATION` (how long a
//! run paused for a headnode API outage waits for it to answer again;
//! default 10m, 0 allowed) and `--outage-probe-timeout DURATION` (how long
//! one ping may take; default 10s, 0 refused).

use std::time::Duration;

use agentsadm_sim::faults::{LatencySpec, SimApi};

use crate::one_at_a_time::{publish, sim};
use crate::outage::{after_first_server, spawn_agentsadm};

/// `update -y -J 1 --outage-wait 2s` while CNAPI stops answering for good
/// once the first server finished: the run says the pause once, with the
/// operator's bound ("waiting up to 2.0s"), then stops with exit status 2
/// and no server failed or timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outage_pause_is_bounded_by_the_operators_flags() {
    let dc = sim(3).await;
    dc.faults().set_install_latency(LatencySpec::fixed(1000));
    let image = publish(&dc, "1.1.0").to_string();
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("run.log");
    let child = spawn_agentsadm(
        &dc,
        &log,
        &[
            "update",
            "cmon-agent",
            "--image",
            &image,
            "-y",
            "-J",
            "1",
            "--outage-wait",
            "2s",
            "--outage-probe-timeout",
            "1s",
            "--json",
        ],
    );
    let (code, out, err) = after_first_server(child, || async {
        dc.faults().set_api_down(SimApi::Cnapi, true);
    })
    .await;
    assert_eq!(code, 2, "{out}\n{err}");
    let paused: Vec<&str> = err.lines().filter(|l| l.contains("paused;")).collect();
    assert_eq!(paused.len(), 1, "said once:\n{err}");
    assert!(paused[0].contains("waiting up to 2.0s"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let statuses: Vec<&str> = doc["result"]["servers"]
        .as_object()
        .expect("servers")
        .values()
        .map(|s| s["status"].as_str().unwrap_or("?"))
        .collect();
    assert!(statuses.contains(&"succeeded"), "{statuses:?}");
    assert!(
        !statuses.iter().any(|s| *s == "failed" || *s == "timed-out"),
        "no server failed: {statuses:?}"
    );
    dc.faults().set_api_down(SimApi::Cnapi, false);

    // 0 is no bound for a ping: refused before anything runs.
    let child = spawn_agentsadm(
        &dc,
        &log,
        &["update", "cmon-agent", "-y", "--outage-probe-timeout", "0"],
    );
    let done = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("agentsadm ends")
        .expect("agentsadm output");
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(err.contains("must be more than 0"), "{err}");
    dc.shutdown().await;
}
