//! The README's operator tasks, run as written: every `agentsadm` line of
//! its "Operator tasks" section, in order, through the binary against a
//! simulated datacenter, each expected to exit 0. `RUN` becomes the id of
//! the newest run in `agentsadm history` at that point. A command the
//! README shows that does not work (a renamed flag, a wrong example) fails
//! here.

use agentsadm_sim::SeedSpec;

use crate::readme_common::{code_lines, readme, words};

/// The `agentsadm` lines of the README's "Operator tasks" section.
fn task_commands() -> Vec<String> {
    let readme = readme();
    let start = readme
        .find("\n## Operator tasks\n")
        .expect("the README has an Operator tasks section");
    let section = &readme[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    code_lines(section)
        .into_iter()
        .filter(|l| l.starts_with("agentsadm "))
        .map(str::to_string)
        .collect()
}

#[test]
fn command_lines_split_as_a_shell_splits_them() {
    assert_eq!(
        words("agentsadm hold vm-agent --reason 'change # freeze' -s cn0001 # a#b"),
        [
            "agentsadm",
            "hold",
            "vm-agent",
            "--reason",
            "change # freeze",
            "-s",
            "cn0001"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_task_in_the_readme_runs_as_written() {
    let commands = task_commands();
    assert!(commands.len() >= 20, "{commands:?}");
    // Each command is only to exit 0, one after another: without SAPI's
    // latency model (21 ms a write), which none of them is about.
    let dc = crate::sim_common::records_dc(3, SeedSpec::with_newer()).await;
    let state = tempfile::tempdir().unwrap();
    // Relative paths (`--svg run.svg`) land in the test's own directory.
    let cli = crate::cli_common::agentsadm(&dc)
        .state(state.path())
        .cwd(state.path());
    for line in &commands {
        let mut args = words(line);
        assert_eq!(args.remove(0), "agentsadm");
        if args.iter().any(|a| a == "RUN") {
            let (code, out, err) = cli.run(&["history", "--json"]).await;
            assert_eq!(code, 0, "{err}");
            let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
            let newest = doc["runs"][0]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("`{line}`: no run recorded yet: {out}"))
                .to_string();
            for a in args.iter_mut().filter(|a| *a == "RUN") {
                *a = newest[..8].to_string();
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = cli.run(&args).await;
        assert_eq!(code, 0, "`{line}` exited {code}:\n{out}\n{err}");
        if let Some(at) = args.iter().position(|a| *a == "--svg") {
            let picture = state.path().join(args[at + 1]);
            let text = std::fs::read_to_string(&picture).expect("the picture is written");
            assert!(text.starts_with("<svg "), "{text}");
        }
    }
    dc.shutdown().await;
}
