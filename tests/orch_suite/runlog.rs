//! The log of every run and the command line's JSON errors, through the
//! binary against the simulator: one bunyan log per orchestrator run (at
//! `--log-file`, or under `$XDG_STATE_HOME/agentsadm/logs/`), holding the
//! command line, the plan, each step's start and end, the summary, with
//! the real hostname; the `bunyan` CLI renders it.

use std::path::Path;

use agentsadm_sim::SeedSpec;

use agentsadm_sim::SimConfig;

use agentsadm_sim::SimDc;

use crate::tools;

async fn sim(cns: usize) -> SimDc {
    SimDc::start(
        SimConfig::default()
            .servers(cns)
            .populate(SeedSpec::with_newer()),
    )
    .await
    .expect("simulator starts")
}

/// Run the binary against `dc` with `$XDG_STATE_HOME` at `state`.
async fn cli(dc: &SimDc, state: &Path, args: &[&str]) -> (i32, String, String) {
    crate::cli_common::agentsadm(dc)
        .state(state)
        .run(args)
        .await
}

fn records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("log written")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_writes_a_bunyan_log() {
    let dc = sim(2).await;
    let state = tempfile::tempdir().unwrap();

    // No --log-file: the run's log is in the state directory, named
    // <timestamp>-<pid>-update.log, and its path is printed at the end.
    let (code, _, err) = cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-y"]).await;
    assert_eq!(code, 0, "{err}");
    let dir = state.path().join("agentsadm/logs");
    let logs: Vec<_> = std::fs::read_dir(&dir)
        .expect("log directory")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let path = &logs[0];
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        name.ends_with("-update.log") && name.contains('T'),
        "{name}"
    );
    assert!(err.contains(&format!("log: {}", path.display())), "{err}");

    let recs = records(path);
    let host = agentsadm_types::log::hostname();
    for r in &recs {
        assert_eq!(r["v"], 0);
        assert_eq!(r["name"], "agentsadm");
        assert_eq!(r["hostname"], host.as_str());
        assert!(r["component"].is_string() && r["time"].is_string(), "{r}");
    }
    let find = |msg: &str| {
        recs.iter()
            .filter(|r| r["msg"].as_str().is_some_and(|m| m.starts_with(msg)))
            .collect::<Vec<_>>()
    };
    let argv = find("agentsadm update vm-agent --latest -y");
    assert_eq!(argv.len(), 1, "the command line");
    assert_eq!(argv[0]["component"], "cli");
    let plan = find("Plan: update vm-agent");
    assert_eq!(plan[0]["component"], "planner");
    assert!(plan[0]["plan"]["servers"].is_object(), "the plan as JSON");
    let started = find("step started");
    let done = find("step done");
    assert_eq!(started.len(), 3, "the headnode and two CNs");
    assert_eq!(done.len(), 3);
    for r in &done {
        assert_eq!(r["component"], "executor");
        assert_eq!(r["agent"], "vm-agent");
        assert!(r["elapsed_ms"].is_u64() && r["server_name"].is_string());
    }
    let summary: Vec<_> = recs
        .iter()
        .filter(|r| r["component"] == "summary")
        .collect();
    assert_eq!(summary.len(), 1);
    assert!(
        summary[0]["msg"]
            .as_str()
            .unwrap()
            .contains("Updated 3 of 3 servers")
    );
    assert_eq!(summary[0]["summary"][0]["component"], "vm-agent");

    // --log-file chooses; it also takes a failure, with its remote text.
    let chosen = state.path().join("chosen.log");
    let chosen_s = chosen.to_str().unwrap();
    let (code, _, _) = cli(
        &dc,
        state.path(),
        &[
            "update",
            "vm-agent",
            "--latest",
            "-y",
            "-s",
            "nope",
            "--log-file",
            chosen_s,
        ],
    )
    .await;
    assert_eq!(code, 1);
    let recs = records(&chosen);
    assert!(
        recs.iter()
            .any(|r| r["level"] == 50 && r["error"].as_str().is_some_and(|e| e.contains("nope"))),
        "{recs:?}"
    );

    if tools::require_tool("bunyan", "npm: npm install -g bunyan") {
        let out = std::process::Command::new("bunyan")
            .args(["--no-color", "--no-pager"])
            .arg(path)
            .output()
            .expect("bunyan runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // bunyan echoes lines it cannot read as they are.
        assert!(!text.contains("{\"name\""), "bunyan did not parse:\n{text}");
        assert!(text.contains("INFO: agentsadm/executor/"), "{text}");
        assert!(
            text.contains("step done in") && text.contains(&format!(" on {host}:")),
            "{text}"
        );
    }
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_failures_print_an_error_document() {
    let dc = sim(1).await;
    let state = tempfile::tempdir().unwrap();
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "update", "vm-agent", "--latest", "-y", "-s", "nope", "--json",
        ],
    )
    .await;
    assert_eq!(code, 1);
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(doc["exit_status"], 1);
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown server nope")
    );
    assert!(err.contains("unknown server nope"), "{err}");
    dc.shutdown().await;
}

#[test]
fn connection_refused_is_one_short_line_naming_the_url() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["list", "--json"])
        .env("SAPI_URL", "http://127.0.0.1:9")
        .env("CNAPI_URL", "http://127.0.0.1:9")
        .env("IMGAPI_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot connect to http://127.0.0.1:9"),
        "{err}"
    );
    assert!(
        !err.contains("tcp connect") && !err.contains("os error"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["exit_status"], 1);
}

/// The run log answers "what happened" (issue 23): every step record has
/// its CNAPI task and its health gate, the canary's verdict and the
/// answers (here -y) are there, the lock's events, the skipped server
/// with its reason, and the exit status as a number. `--json` carries the
/// log's path; `-q` still prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_log_answers_what_happened() {
    let dc = sim(3).await;
    let down = dc.server("cn0003").unwrap().uuid;
    dc.set_running(down, false);
    let state = tempfile::tempdir().unwrap();
    let (code, out, err) = cli(
        &dc,
        state.path(),
        &[
            "update", "vm-agent", "--latest", "-y", "--canary", "1", "-x", "headnode", "--json",
        ],
    )
    .await;
    assert_eq!(code, 2, "cn0003 is down: a blocking skip\n{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let log = doc["log"].as_str().expect("the log's path in the document");
    assert!(
        !err.contains("log:"),
        "with --json the path is in the document: {err}"
    );
    let recs = records(Path::new(log));
    let msgs = |component: &str| -> Vec<&serde_json::Value> {
        recs.iter()
            .filter(|r| r["component"] == component)
            .collect()
    };

    // Each step: its task and its gate.
    let steps: Vec<_> = msgs("executor")
        .into_iter()
        .filter(|r| {
            r["msg"]
                .as_str()
                .is_some_and(|m| m.starts_with("step done"))
        })
        .collect();
    assert_eq!(steps.len(), 2, "cn0001 and cn0002");
    for r in &steps {
        assert!(
            r["task"]
                .as_str()
                .is_some_and(|t| t.parse::<uuid::Uuid>().is_ok()),
            "{r}"
        );
        assert_eq!(r["gate_passed"], true, "{r}");
        assert_eq!(r["gate_seen"], "online", "{r}");
        assert!(r["gate"].is_string(), "{r}");
        assert!(r["msg"].as_str().unwrap().contains("health gate"), "{r}");
    }
    // The canary's verdict and the answers.
    let canary: Vec<_> = msgs("executor")
        .into_iter()
        .filter(|r| r["event"] == "canary")
        .collect();
    assert_eq!(canary.len(), 1);
    assert_eq!(canary[0]["passed"], true);
    let answers: Vec<&str> = msgs("operator")
        .iter()
        .map(|r| r["msg"].as_str().unwrap())
        .collect();
    assert!(
        answers
            .iter()
            .any(|a| a.contains("-y: agreed in advance") && a.ends_with("yes")),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .any(|a| a.starts_with("canary passed on") && a.ends_with("yes")),
        "{answers:?}"
    );
    // The lock.
    let lock: Vec<&str> = msgs("lock")
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(lock, ["acquired", "released"]);
    // The skipped server, with why.
    let skipped: Vec<_> = recs.iter().filter(|r| r["event"] == "skipped").collect();
    assert!(
        skipped.iter().any(|r| r["server_name"] == "cn0003"
            && r["blocking"] == true
            && r["reason"].as_str().unwrap().contains("not running")),
        "{skipped:?}"
    );
    assert!(
        skipped.iter().any(|r| r["server_name"] == "headnode"),
        "excluded: {skipped:?}"
    );
    // The exit status, a number.
    let last = recs.last().unwrap();
    assert_eq!(last["exit_status"], 2, "{last}");
    assert_eq!(last["msg"], "command finished with exit status 2");

    // -q: the path is still said, on stderr.
    let (code, _, err) = cli(&dc, state.path(), &["plan", "update", "vm-agent", "-q"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("log: ") && err.contains("-plan.log"), "{err}");
    dc.shutdown().await;
}

/// `plan update` and `update -n` behave the same: both log, with the plan
/// and the exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_dry_run_both_log() {
    let dc = sim(1).await;
    let state = tempfile::tempdir().unwrap();
    let (code, plan_out, _) = cli(
        &dc,
        state.path(),
        &["plan", "update", "vm-agent", "--latest"],
    )
    .await;
    assert_eq!(code, 0);
    let (code, dry_out, _) =
        cli(&dc, state.path(), &["update", "vm-agent", "--latest", "-n"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        format!("{plan_out}Dry run (-n): nothing was changed.\n"),
        dry_out,
        "the same plan; -n says it changed nothing"
    );
    let dir = state.path().join("agentsadm/logs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|n| n.rsplit('-').next().unwrap().to_string());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names[0].ends_with("-plan.log") && names[1].ends_with("-update.log"),
        "{names:?}"
    );
    for n in &names {
        let recs = records(&dir.join(n));
        assert!(
            recs.iter()
                .any(|r| r["component"] == "planner" && r["plan"].is_object()),
            "{n}"
        );
        assert_eq!(recs.last().unwrap()["exit_status"], 0, "{n}");
    }
    dc.shutdown().await;
}

/// `--json` is JSON for argument errors too.
#[test]
fn argument_errors_are_json_with_json() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"))
        .args(["update", "vm-agent", "--task-timeout", "5x", "--json"])
        .env("XDG_STATE_HOME", "/nonexistent-agentsadm-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(doc["exit_status"], 1);
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("'5x'"),
        "{doc}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}
