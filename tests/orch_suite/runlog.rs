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

/// Whether `name` is a run log's name for `command`:
/// `<YYYYMMDDTHHMMSSZ>-<pid>-<command>.log`.
fn is_log_name(name: &str, command: &str) -> bool {
    let Some(rest) = name.strip_suffix(&format!("-{command}.log")) else {
        return false;
    };
    let Some((stamp, pid)) = rest.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    stamp.len() == 16
        && digits(&stamp[..8])
        && &stamp[8..9] == "T"
        && digits(&stamp[9..15])
        && stamp.ends_with('Z')
        && digits(pid)
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
    assert!(is_log_name(name, "update"), "{name}");
    // The last thing said (after the progress lines) is where the log is.
    assert_eq!(
        err.lines().last(),
        Some(format!("log: {}", path.display()).as_str()),
        "{err}"
    );

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
    crate::snapshot::masked_snapshot!("runlog_summary_msg", summary[0]["msg"].as_str().unwrap());
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
    let errors: Vec<&str> = recs
        .iter()
        .filter(|r| r["level"] == 50)
        .filter_map(|r| r["error"].as_str())
        .collect();
    crate::snapshot::masked_snapshot!("runlog_error_records", errors.join("\n"));

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
        // bunyan echoes lines it cannot read as they are. Its rendering
        // (its own format, records in the order servers finish) is looked
        // into, not kept whole: partial matching is the point.
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
    let args = [
        "update", "vm-agent", "--latest", "-y", "-s", "nope", "--json",
    ];
    let ran = cli(&dc, state.path(), &args).await;
    let doc: serde_json::Value =
        serde_json::from_str(&ran.1).unwrap_or_else(|e| panic!("{e}: {:?}", ran.1));
    assert_eq!(doc["exit_status"], 1);
    // The document on stdout and the error on stderr.
    crate::snapshot::masked_snapshot!(
        "runlog_json_failure",
        crate::snapshot::command_text(ran, &args, 1)
    );
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
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["exit_status"], 1);
    // One line naming the URL, no socket jargon ("tcp connect", "os
    // error").
    crate::snapshot::masked_snapshot!(
        "runlog_connection_refused",
        output_text(&out, &["list", "--json"])
    );
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
        err.lines().all(|l| !l.starts_with("log: ")),
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
    }
    // What the step records say, in the order of the plan (a step's
    // record names its server).
    let mut said: Vec<&str> = steps.iter().map(|r| r["msg"].as_str().unwrap()).collect();
    said.sort();
    crate::snapshot::masked_snapshot!("runlog_step_done_msgs", said.join("\n"));
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
    crate::snapshot::masked_snapshot!("runlog_answers", answers.join("\n"));
    // The lock.
    let lock: Vec<&str> = msgs("lock")
        .iter()
        .map(|r| r["event"].as_str().unwrap())
        .collect();
    assert_eq!(lock, ["acquired", "released"]);
    // The skipped server, with why.
    let skipped: Vec<_> = recs.iter().filter(|r| r["event"] == "skipped").collect();
    let down: Vec<_> = skipped
        .iter()
        .filter(|r| r["server_name"] == "cn0003" && r["blocking"] == true)
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    crate::snapshot::masked_snapshot!("runlog_skipped_down", down.join("\n"));
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
    let said = err.strip_prefix("log: ").unwrap_or_else(|| panic!("{err}"));
    let name = Path::new(said.trim_end())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(is_log_name(name, "plan"), "{err}");
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
    // The document names the value it refused ('5x'); stderr is one line.
    crate::snapshot::masked_snapshot!(
        "runlog_argument_error_json",
        output_text(
            &out,
            &["update", "vm-agent", "--task-timeout", "5x", "--json"]
        )
    );
}

/// A finished command as [`crate::snapshot::command_text`] shows one
/// that failed: the command line, stdout, then stderr.
fn output_text(out: &std::process::Output, args: &[&str]) -> String {
    crate::snapshot::command_text(
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        args,
        1,
    )
}
