//! What operators read, checked whole by snapshot (insta): the tables,
//! plans, maps, summaries and errors of the orchestrator's commands
//! against a simulated datacenter with a fixed seed, text and `--json`.
//! A reworded, reordered or missing line fails here, where a substring
//! check would pass. What changes from run to run (times, durations, run
//! ids, ports, paths) is masked by the filters below; nothing else is.
//!
//! After an intended change of output: `INSTA_UPDATE=always cargo test
//! --test orch_suite snapshots`, then read the diff of `snapshots/`.

use agentsadm_sim::{LatencySpec, SeedSpec, SimConfig, SimDc};

/// Masks for what differs between two runs of the same story.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]"),
        (r"127\.0\.0\.1:\d+", "[HOST:PORT]"),
        (r"/tmp/[^\s'\x22)]+", "[PATH]"),
        (r"\b\d+m\d\ds\b", "[DURATION]"),
        (r"\b\d+(\.\d+)?(ms|s)\b", "[DURATION]"),
        (
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            "[UUID]",
        ),
        (r"(run|history|revert) [0-9a-f]{8}\b", "$1 [RUN]"),
        (r"\broot@[^\s:]+(:\d+)?", "[WHO]"),
        // A table's columns are as wide as their widest cell, and a
        // duration's width varies: runs of spaces count as two.
        (r" {2,}", "  "),
    ]
}

/// Run `args`, expect `code`, and snapshot stdout under `name`, with
/// stderr too when the command failed (its error). A run's progress lines
/// on stderr come in the order servers finish, so they are left out.
async fn snap(cli: &crate::cli_common::Agentsadm, name: &str, args: &[&str], code: i32) {
    let (got, out, err) = cli.run(args).await;
    assert_eq!(
        got,
        code,
        "`{}` exited {got}:\n{out}\n{err}",
        args.join(" ")
    );
    let mut text = format!("$ agentsadm {}\n{out}", args.join(" "));
    if code != 0 && !err.trim().is_empty() {
        text.push_str(&format!("--- stderr\n{err}"));
    }
    let mut settings = insta::Settings::clone_current();
    for (re, with) in filters() {
        settings.add_filter(re, with);
    }
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_operators_read() {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .populate(SeedSpec::with_newer())
            .install_latency(LatencySpec::fixed(20)),
    )
    .await
    .expect("simulator starts");
    let state = tempfile::tempdir().unwrap();
    let cli = crate::cli_common::agentsadm(&dc).state(state.path());
    snap(&cli, "list_vm_agent", &["list", "vm-agent"], 0).await;
    snap(
        &cli,
        "list_vm_agent_json",
        &["list", "vm-agent", "--json"],
        0,
    )
    .await;
    snap(&cli, "list_summary", &["list", "--summary"], 0).await;
    snap(&cli, "list_racks", &["list", "--racks"], 0).await;
    snap(&cli, "avail_vm_agent", &["avail", "vm-agent"], 0).await;
    snap(&cli, "avail_vm_agent_json", &["avail", "vm-agent", "-j"], 0).await;
    snap(
        &cli,
        "plan_update_vm_agent",
        &["update", "vm-agent", "--latest", "-n"],
        0,
    )
    .await;
    snap(
        &cli,
        "plan_update_vm_agent_json",
        &["update", "vm-agent", "--latest", "-n", "--json"],
        0,
    )
    .await;
    snap(&cli, "check_clean", &["check"], 0).await;
    snap(
        &cli,
        "update_vm_agent",
        &["update", "vm-agent", "--latest", "-y"],
        0,
    )
    .await;
    snap(
        &cli,
        "history_list",
        &["history", "-o", "status,changed,failed,command"],
        0,
    )
    .await;
    snap(
        &cli,
        "list_summary_after",
        &["list", "--summary", "vm-agent"],
        0,
    )
    .await;
    snap(
        &cli,
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
    )
    .await;
    snap(
        &cli,
        "list_racks_held",
        &["list", "--racks", "net-agent"],
        0,
    )
    .await;
    // Errors: what failed, where, and what to do.
    snap(
        &cli,
        "error_unknown_component",
        &["update", "no-such-agent", "-n"],
        1,
    )
    .await;
    snap(
        &cli,
        "error_unknown_server",
        &["list", "-s", "nosuchhost"],
        1,
    )
    .await;
    snap(&cli, "error_unknown_run", &["history", "nosuchrun"], 1).await;
    snap(
        &cli,
        "plan_marlin_skipped",
        &["update", "marlin-agent", "--latest", "-n"],
        0,
    )
    .await;
    dc.shutdown().await;
}
