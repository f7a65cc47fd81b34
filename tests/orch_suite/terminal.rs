//! A rollout in a real terminal (tmux, 120x40): the canary question is
//! seen. The live display is taken off the screen while it is asked, so
//! no redraw wipes it and no ETA ticks under it; the question and the
//! answer stay on the screen; Ctrl-C and the end of input (Ctrl-D) are
//! "no": exit status 2 and no server after the canary wave started.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentsadm_sim::{LatencySpec, SeedSpec, SimConfig, SimDc};

use crate::tools;

/// A tmux server of the test's own (its own socket, in the test's
/// directory), killed when dropped.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    /// A 120x40 session running `script` (with `sh`), kept on screen after
    /// it ends.
    pub(crate) fn start(name: &str, script: &Path) -> Tmux {
        Tmux::sized(name, script, (120, 40))
    }

    /// [`Tmux::start`] at `columns` x `rows`.
    fn sized(name: &str, script: &Path, (columns, rows): (u16, u16)) -> Tmux {
        // The socket beside the script, in the test's own directory: gone
        // with it.
        let socket = script.with_file_name(format!("tmux-{name}.sock"));
        let tmux = Tmux {
            socket: socket.display().to_string(),
        };
        // The pane stays on screen after the command ends. Set in the
        // server's own configuration, read before the command starts: set
        // after `new-session`, a command that ended first (a short `list`
        // on a loaded machine) had closed the window ("no such window").
        let conf = script.with_file_name(format!("tmux-{name}.conf"));
        std::fs::write(&conf, "set-option -g remain-on-exit on\n").expect("tmux.conf written");
        let cmd = format!("sh {}", script.display());
        tmux.run(&[
            "-f",
            conf.to_str().expect("a UTF-8 path"),
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &columns.to_string(),
            "-y",
            &rows.to_string(),
            &cmd,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the terminal shows, trailing blank lines dropped.
    fn screen(&self) -> String {
        let text = self.run(&["capture-pane", "-p", "-t", "t"]);
        text.trim_end().to_string()
    }

    /// The screen once the command has ended, up to its `EXIT=N` line
    /// (nothing draws any more; what tmux adds once the shell is gone
    /// comes after it, with a clock time), with lines the terminal
    /// wrapped joined again (`capture-pane -J`), so that a mask sees a
    /// whole line: what a snapshot takes.
    fn settled(&self) -> String {
        let text = self.run(&["capture-pane", "-p", "-J", "-t", "t"]);
        let mut lines = Vec::new();
        for line in text.lines() {
            lines.push(line);
            if line.starts_with("EXIT=") {
                return lines.join("\n");
            }
        }
        panic!("not settled yet (no EXIT= line):\n{text}");
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Wait (up to two minutes) until the screen shows `text` (anywhere:
    /// the screen is still being drawn, so partial matching is the point).
    pub(crate) async fn wait_for(&self, text: &str) -> String {
        self.wait_until(|screen| {
            if screen.contains(text) {
                Ok(())
            } else {
                Err(format!("never showed {text:?}"))
            }
        })
        .await
    }

    /// Wait (up to two minutes) until `check` accepts the screen, and
    /// return that screen. A live display is redrawn while it is read, and
    /// a slow machine draws a state (a wave still starting) later than a
    /// fast one: tests wait for the screen they assert on, never for a
    /// time. The two minutes only bound a hang; the panic says why the
    /// last screen was refused.
    pub(crate) async fn wait_until(&self, check: impl Fn(&str) -> Result<(), String>) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let screen = self.screen();
            let refused = match check(&screen) {
                Ok(()) => return screen,
                Err(why) => why,
            };
            assert!(Instant::now() < deadline, "{refused}:\n{screen}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-S", &self.socket, "kill-server"])
            .output();
    }
}

/// The last line on the screen.
fn last_line(screen: &str) -> &str {
    screen.lines().last().unwrap_or_default()
}

/// A script in `dir` that runs `agentsadm ARGS` against `dc`, then prints
/// its exit status (`EXIT=N`).
pub(crate) fn script(dc: &SimDc, dir: &Path, args: &str) -> std::path::PathBuf {
    let urls = dc.urls();
    let script = dir.join("run.sh");
    // The shell lives on after Ctrl-C (a trap), to print the exit status.
    std::fs::write(
        &script,
        format!(
            "trap : INT\nexport IMGAPI_URL={} SAPI_URL={} CNAPI_URL={} UPDATES_URL={} XDG_STATE_HOME={}\n{} {args}\necho \"EXIT=$?\"\n",
            urls.imgapi,
            urls.sapi,
            urls.cnapi,
            urls.updates,
            dir.display(),
            env!("CARGO_BIN_EXE_agentsadm"),
        ),
    )
    .unwrap();
    script
}

/// Update vm-agent with a canary wave of one server in tmux, confirm the
/// plan, wait for the canary question, then answer it with `keys`.
/// Returns the screen at the end, how many servers run the new image and
/// the run's log.
async fn canary_answered_with(name: &str, keys: &[&str]) -> (String, usize, String) {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(4)
            .populate(SeedSpec::with_newer())
            .install_latency(LatencySpec::fixed(300)),
    )
    .await
    .expect("simulator starts");
    let before = dc.server_agents(dc.headnode().uuid);
    let old = before
        .iter()
        .find(|a| a.name == "vm-agent")
        .expect("vm-agent installed")
        .version
        .clone();
    let dir = tempfile::tempdir().unwrap();
    let script = script(&dc, dir.path(), "update vm-agent --latest --canary 1 -J 2");
    let tmux = Tmux::start(name, &script);
    tmux.wait_for("Proceed? [y/N]").await;
    tmux.keys(&["y", "Enter"]);
    let question = "continue with 4 servers? [y/N]";
    let screen = tmux.wait_for(question).await;
    assert!(
        last_line(&screen).starts_with("canary passed on cn")
            && last_line(&screen).ends_with(question),
        "the question is the last thing on the screen:\n{screen}"
    );
    // Several redraws later (the rows tick every second, the bar four
    // times a second), nothing was drawn over or under it. The sleep is a
    // window in which nothing may happen, not a wait for something: a slow
    // machine only sees fewer would-be redraws in it, it cannot fail.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let later = tmux.screen();
    assert_eq!(last_line(&later), last_line(&screen), "{later}");
    // Mid-run (the question waits): looked into, not kept whole.
    assert!(!later.contains("ETA"), "no bar while asking:\n{later}");
    tmux.keys(keys);
    tmux.wait_for("EXIT=").await;
    let end = tmux.settled();
    let upgraded = dc
        .servers()
        .iter()
        .filter(|s| {
            dc.server_agents(s.uuid)
                .iter()
                .any(|a| a.name == "vm-agent" && a.version != old)
        })
        .count();
    drop(tmux);
    dc.shutdown().await;
    let mut log = String::new();
    for entry in std::fs::read_dir(dir.path().join("agentsadm/logs")).expect("run log") {
        log += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    (end, upgraded, log)
}

/// The answers the run log recorded (`"answer"` of each record that has
/// one), in order.
fn answers(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["answer"].as_str().map(str::to_string))
        .collect()
}

/// The screen from the canary question on.
fn from_question(screen: &str) -> &str {
    let at = screen.find("canary passed on").expect("question on screen");
    &screen[at..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_the_canary_question_is_no() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let (screen, upgraded, log) = canary_answered_with("ctrl-c", &["C-c"]).await;
    // The run's log has the answer, and how it was given.
    // The plan's question, the canary's (how it was answered, and the
    // answer it counts as).
    assert_eq!(
        answers(&log),
        ["yes", "Ctrl-C (taken as no)", "no"],
        "{log}"
    );
    // The settled screen from the question on: the answer, the canary
    // wave stopped (4 not started), no stale bar, exit status 2.
    crate::snapshot::masked_snapshot!("terminal_canary_ctrl_c", from_question(&screen));
    assert_eq!(upgraded, 1, "only the canary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_input_at_the_canary_question_is_no() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let (screen, upgraded, log) = canary_answered_with("eof", &["C-d"]).await;
    // The plan's question, the canary's (how it was answered, and the
    // answer it counts as).
    assert_eq!(
        answers(&log),
        ["yes", "end of input (taken as no)", "no"],
        "{log}"
    );
    crate::snapshot::masked_snapshot!("terminal_canary_end_of_input", from_question(&screen));
    assert_eq!(upgraded, 1, "only the canary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_at_the_canary_question_goes_on_below_it() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let (screen, upgraded, _) = canary_answered_with("yes", &["y", "Enter"]).await;
    let tail = from_question(&screen);
    // The 4 other servers report in the order they finish: the answer
    // and what follows it are looked for, not the whole tail.
    assert!(
        tail.contains("continue with 4 servers? [y/N] y\ncontinuing with 4 more servers\n"),
        "{screen}"
    );
    assert!(!tail.contains("ETA"), "no stale bar:\n{screen}");
    assert!(screen.lines().any(|l| l == "EXIT=0"), "{screen}");
    assert_eq!(upgraded, 5);
}

/// 40 CNs and a headnode whose installs take `latency_ms`, and
/// `agentsadm ARGS` against them in an 80x24 terminal named `name`.
async fn at_80x24(latency_ms: u64, args: &str, name: &str) -> (SimDc, tempfile::TempDir, Tmux) {
    let dc = SimDc::start(
        SimConfig::default()
            .servers(40)
            .populate(SeedSpec::with_newer())
            .install_latency(LatencySpec::fixed(latency_ms)),
    )
    .await
    .expect("simulator starts");
    let dir = tempfile::tempdir().unwrap();
    let script = script(&dc, dir.path(), args);
    let tmux = Tmux::sized(name, &script, (80, 24));
    (dc, dir, tmux)
}

/// A live screen is read while it is drawn: its lines are looked into,
/// not kept whole.
///
/// `Ok` when `screen` (80x24) shows the bar, then exactly 21 server rows
/// and `+19 more running` as its last line, no line wider than 80 columns;
/// otherwise what is not so.
fn whole_wave_at_80x24(screen: &str) -> Result<(), String> {
    let lines: Vec<&str> = screen.lines().collect();
    let bar = lines
        .iter()
        .position(|l| l.contains("servers, ETA"))
        .ok_or("no bar")?;
    let below = &lines[bar + 1..];
    if below.len() != 22 {
        return Err(format!("{} lines below the bar, not 22", below.len()));
    }
    if let Some(l) = below[..21]
        .iter()
        .find(|l| !(l.contains(" cn0") || l.contains(" headnode")))
    {
        return Err(format!("{l:?} is not a server's row"));
    }
    if !below[21].trim_end().ends_with("+19 more running") {
        return Err(format!(
            "the last line is {:?}, not +19 more running",
            below[21]
        ));
    }
    if let Some(l) = lines.iter().find(|l| l.chars().count() > 80) {
        return Err(format!("{l:?} is wider than 80 columns"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_that_do_not_fit_at_80x24_are_counted() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let (dc, _dir, tmux) = at_80x24(4_000, "update vm-agent --latest -J 40 -y", "rows").await;
    // The whole wave of 40 running: the bar, 21 rows and the count of the
    // 19 others, nothing scrolled off or wrapped. The wave's servers start
    // one after another (the first frame with a count may say "+6"), so
    // wait for the frame of the whole wave rather than the first count.
    tmux.wait_until(whole_wave_at_80x24).await;
    tmux.wait_for("EXIT=").await;
    let end = tmux.settled();
    let from = end
        .find("Updated 41 of 41 servers")
        .unwrap_or_else(|| panic!("{end}"));
    // The end as the operator reads it: no stale bar, exit status 0.
    crate::snapshot::masked_snapshot!("terminal_80x24_end", &end[from..]);
    drop(tmux);
    dc.shutdown().await;
}

/// On a terminal the log lines are coloured, and with `NO_COLOR` set
/// (<https://no-color.org>) nothing is: the screen, attributes included
/// (`capture-pane -e`), has no colour sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_color_turns_colour_off_on_a_terminal() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let dc = SimDc::start(SimConfig::default().servers(1))
        .await
        .expect("simulator starts");
    // Any SGR sequence that sets a foreground colour (30-37, 90-97, 38;...).
    let coloured = |screen: &str| {
        screen.split('\x1b').skip(1).any(|seq| {
            seq.strip_prefix('[')
                .and_then(|s| s.split_once('m'))
                .is_some_and(|(params, _)| {
                    params
                        .split(';')
                        .any(|p| p.starts_with('3') || p.starts_with('9'))
                })
        })
    };
    for (name, env, want) in [("colour", "", true), ("nocolour", "NO_COLOR=1 ", false)] {
        let dir = tempfile::tempdir().unwrap();
        let script = script(&dc, dir.path(), "list");
        // The same script, with the log turned up and NO_COLOR as asked.
        let text = std::fs::read_to_string(&script).unwrap().replace(
            env!("CARGO_BIN_EXE_agentsadm"),
            &format!(
                "{env}AGENTSADM_LOG=debug {}",
                env!("CARGO_BIN_EXE_agentsadm")
            ),
        );
        std::fs::write(&script, text).unwrap();
        let tmux = Tmux::start(name, &script);
        tmux.wait_for("EXIT=0").await;
        let screen = tmux.run(&["capture-pane", "-e", "-p", "-t", "t"]);
        // The log lines are looked for among the listing: partial
        // matching is the point (the colour is what is checked).
        assert!(screen.contains("DEBUG"), "{screen}");
        assert_eq!(coloured(&screen), want, "{name}:\n{screen:?}");
        drop(tmux);
    }
    dc.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_at_80x24_leaves_no_bar_behind_and_the_eta_waits_for_a_server() {
    if !tools::require_tool("tmux", "tmux") {
        return;
    }
    let (dc, _dir, tmux) = at_80x24(3_000, "update vm-agent --latest -J 20 -y", "stale").await;
    // The canary runs: nothing finished, so no estimate yet (indicatif's
    // own said `ETA 0s` here).
    let screen = tmux.wait_for("0/41 servers").await;
    let bar = screen.lines().find(|l| l.contains("0/41 servers")).unwrap();
    assert!(bar.trim_end().ends_with("ETA -"), "{screen}");
    // A wave of 20 in flight (the bar past the canary and a row for each
    // of the 20, however long they take to start), then Ctrl-C: the
    // interrupt's line (four rows at 80 columns) is printed above the bars.
    tmux.wait_until(|screen| {
        let rows = screen.lines().filter(|l| l.starts_with("  cn0")).count();
        if screen.contains("1/41 servers") && rows == 20 {
            Ok(())
        } else {
            Err(format!("not the wave of 20 running ({rows} rows)"))
        }
    })
    .await;
    tmux.keys(&["C-c"]);
    tmux.wait_for("EXIT=").await;
    // The scrollback holds the progress of a wave cut short (however
    // far each server got): the interrupt's line and the absence of a
    // bar are looked for, partial matching is the point.
    let all = tmux.run(&["capture-pane", "-p", "-S", "-", "-t", "t"]);
    assert!(all.contains("interrupted: no further servers"), "{all}");
    // Not one copy of the bar is left anywhere, scrollback included.
    assert!(
        !all.lines().any(|l| l.contains("/41 servers, ETA")),
        "a stale bar was left behind:\n{all}"
    );
    drop(tmux);
    dc.shutdown().await;
}
