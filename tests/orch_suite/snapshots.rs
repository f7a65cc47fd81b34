//! What operators read, checked whole by snapshot (insta): the tables,
//! plans, maps, summaries and errors of the orchestrator's commands
//! against a simulated datacenter with a fixed seed, text and `--json`.
//! A reworded, reordered or missing line fails here, where a substring
//! check would pass. What changes from run to run (times, durations, run
//! ids, ports, paths) is masked (tests/common/snapshot.rs); nothing else
//! is.
//!
//! After an intended change of output: `cargo insta review` (or set insta
//! to write them locally) and read the diff of `snapshots/`; CI never
//! writes them.

use agentsadm_sim::{LatencySpec, SeedSpec, SimConfig, SimDc};

/// Run `args`, expect `code`, and snapshot what it printed under `name`
/// (the one helper: tests/common/snapshot.rs).
async fn snap(cli: &crate::cli_common::Agentsadm, name: &str, args: &[&str], code: i32) {
    crate::snapshot::command_snapshot!(cli, name, args, code);
}

/// Each of `cases` (a snapshot's name, the command line, the exit status
/// it must end with) in order: later ones see what earlier ones changed.
async fn snap_all(cli: &crate::cli_common::Agentsadm, cases: &[(&str, &[&str], i32)]) {
    for (name, args, code) in cases {
        snap(cli, name, args, *code).await;
    }
}

/// A simulated datacenter of `servers` compute nodes with newer images
/// (installs of 20 ms), and the binary against it with run logs and
/// history in a directory of the test's own.
async fn datacenter(servers: usize) -> (SimDc, tempfile::TempDir, crate::cli_common::Agentsadm) {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(servers)
            .populate(SeedSpec::with_newer())
            .install_latency(LatencySpec::fixed(20)),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let cli = crate::cli_common::agentsadm(&dc).state(state.path());
    (dc, state, cli)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_operators_read() {
    let (dc, _state, cli) = datacenter(4).await;
    snap_all(
        &cli,
        &[
            ("list_vm_agent", &["list", "vm-agent"], 0),
            ("list_vm_agent_json", &["list", "vm-agent", "--json"], 0),
            ("list_summary", &["list", "--summary"], 0),
            ("list_racks", &["list", "--racks"], 0),
            ("avail_vm_agent", &["avail", "vm-agent"], 0),
            ("avail_vm_agent_json", &["avail", "vm-agent", "-j"], 0),
            (
                "plan_update_vm_agent",
                &["update", "vm-agent", "--latest", "-n"],
                0,
            ),
            (
                "plan_update_vm_agent_json",
                &["update", "vm-agent", "--latest", "-n", "--json"],
                0,
            ),
            ("check_clean", &["check"], 0),
            (
                "update_vm_agent",
                &["update", "vm-agent", "--latest", "-y"],
                0,
            ),
            (
                "history_list",
                &["history", "-o", "status,changed,failed,command"],
                0,
            ),
            ("list_summary_after", &["list", "--summary", "vm-agent"], 0),
            (
                "hold_plan",
                &[
                    "hold",
                    "net-agent",
                    "-s",
                    "cn0001",
                    "--reason",
                    "case 4711",
                    "-y",
                ],
                0,
            ),
            ("list_racks_held", &["list", "--racks", "net-agent"], 0),
            // Errors: what failed, where, and what to do.
            (
                "error_unknown_component",
                &["update", "no-such-agent", "-n"],
                1,
            ),
            ("error_unknown_server", &["list", "-s", "nosuchhost"], 1),
            ("error_unknown_run", &["history", "nosuchrun"], 1),
            (
                "plan_marlin_skipped",
                &["update", "marlin-agent", "--latest", "-n"],
                0,
            ),
        ],
    )
    .await;
    dc.shutdown().await;
}

/// A run and its history as operators read them, one server at a time
/// (`--concurrency 1`) so that the order servers finish in is the plan's:
/// no runs yet, a run's `--json`, `history` and `history RUN` in text and
/// `--json`, the summary and rack map in `--json`, errors in `--json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_runs_and_history_read() {
    let (dc, _state, cli) = datacenter(2).await;
    snap_all(
        &cli,
        &[
            ("history_no_runs", &["history"], 0),
            ("history_no_runs_json", &["history", "--json"], 0),
            (
                "run_update_json",
                &[
                    "update",
                    "config-agent",
                    "--latest",
                    "-y",
                    "--concurrency",
                    "1",
                    "--json",
                ],
                0,
            ),
            ("history_one_run", &["history"], 0),
            ("history_one_run_json", &["history", "--json"], 0),
        ],
    )
    .await;
    let (_, out, _) = cli.run(&["history", "--json"]).await;
    let doc: serde_json::Value = serde_json::from_str(&out).expect("history --json");
    let id = doc["runs"][0]["id"].as_str().expect("a run id").to_string();
    snap_all(
        &cli,
        &[
            ("history_run", &["history", &id[..8]], 0),
            ("history_run_json", &["history", &id[..8], "--json"], 0),
            ("list_summary_json", &["list", "--summary", "--json"], 0),
            ("list_racks_json", &["list", "--racks", "--json"], 0),
            (
                "error_unknown_component_json",
                &["update", "no-such-agent", "-n", "--json"],
                1,
            ),
            (
                "error_unknown_run_json",
                &["history", "nosuchrun", "--json"],
                1,
            ),
        ],
    )
    .await;
    dc.shutdown().await;
}

/// The masks (tests/common/snapshot.rs) on what differs between two runs
/// of one story: each kind of value once, masked, beside words that stay.
#[test]
fn the_masks_hide_what_differs_between_runs() {
    let operator = ["SUDO_USER", "LOGNAME", "USER"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "root".to_string());
    let tmp = std::env::temp_dir().join("agentsadm-x/logs/20261202T041031Z-4242-update.log");
    let sample = [
        "server root /dev/shm/agentsadm-sim-3712-6022a803/servers/cn0001 (sim)".to_string(),
        format!("log: {}", tmp.display()),
        "started 2026-12-02T04:10:31.456Z, ended 2026-12-02T04:10:35Z".to_string(),
        "took 1m02s; canary in 3.3s; gate 341ms".to_string(),
        "from http://127.0.0.1:38781?channel=release".to_string(),
        "image 039c5097-a7f4-4b39-9ff6-dce47dd2de6e (039c5097)".to_string(),
        "Recorded as run c1663b92 (agentsadm history c1663b92)".to_string(),
        r#"  "elapsed_s": 12.5,"#.to_string(),
        "vm-agent  12     0       1".to_string(),
        format!("held on this server by {operator} at 2026-12-02T04:10:31Z: case 4711"),
        format!(r#"  "user": "{operator}","#),
    ]
    .join("\n");
    crate::snapshot::masked_snapshot!("masks_on_a_sample", sample);
}
