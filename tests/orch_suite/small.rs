//! A rollout too small for a median (at most five servers) says how its
//! slow servers are judged: against the catalog's expected install times
//! (or a server's own earlier runs, once run history feeds them), with
//! `--straggler-timeout` absolute from the first server.

use agentsadm_sim::{SeedSpec, SimConfig, SimDc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_rollout_says_how_slow_servers_are_judged() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(3)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts");
    let cli = crate::cli_common::agentsadm(&dc);
    let (code, out, err) = cli
        .run(&[
            "update",
            "vm-agent",
            "--latest",
            "-s",
            "cn0001,cn0002",
            "-n",
        ])
        .await;
    assert_eq!(code, 0, "{err}");
    // (The updates server's port changes from run to run.)
    let out = out.replace(&dc.urls().updates, "http://127.0.0.1:PORT");
    crate::snapshot::snapshot!("update_small_rollout", out);

    dc.shutdown().await;
}
