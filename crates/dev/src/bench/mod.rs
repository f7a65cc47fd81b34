//! Benchmarks (`agentsadm bench ...`). Each prints ratios measured in the same
//! run, never absolute goals checked against a clock.
//!
//! Every benchmark module exposes a clap `Args` struct and
//! `async fn run(args) -> anyhow::Result<serde_json::Value>` returning the one
//! JSON object it prints. `bench all` ([`run_all`]) runs each in its own
//! process, in turn, with options to shrink each, and prints one table (or, with `--json`, one
//! object holding each benchmark's object and the machine it ran on).

pub mod gate;
pub mod history;
pub mod install;
pub mod journal;
pub mod plan;
pub mod rollout;

use std::time::Instant;

use serde_json::{Value, json};

use agentsadm_types::output::table;

/// One benchmark of `bench all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Benchmark {
    Install,
    Rollout,
    Plan,
}

impl Benchmark {
    pub const ALL: [Benchmark; 3] = [Benchmark::Install, Benchmark::Rollout, Benchmark::Plan];

    pub fn as_str(&self) -> &'static str {
        match self {
            Benchmark::Install => "install",
            Benchmark::Rollout => "rollout",
            Benchmark::Plan => "plan",
        }
    }
}

/// Options of `agentsadm bench all`. Unset sizes take each benchmark's
/// own default (or the `--quick` preset).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AllBenchArgs {
    /// Only these benchmarks (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "BENCHMARKS")]
    pub only: Vec<Benchmark>,
    /// Smaller sizes everywhere: a smoke run of well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// install: image payload in MB.
    #[arg(long, value_name = "MB")]
    pub image_mb: Option<usize>,
    /// install: runs of each path (the median is reported).
    #[arg(long, value_name = "N")]
    pub install_runs: Option<usize>,
    /// rollout: servers in the one-component runs.
    #[arg(long, value_name = "N")]
    pub rollout_servers: Option<usize>,
    /// rollout: servers in the shar-style run.
    #[arg(long, value_name = "N")]
    pub shar_servers: Option<usize>,
    /// rollout: injected install latency per component, milliseconds.
    #[arg(long, value_name = "MS")]
    pub latency_ms: Option<u64>,
    /// rollout: what the orchestrator runs against.
    #[arg(long, value_enum)]
    pub backend: Option<rollout::Backend>,
    /// plan: servers in the synthetic datacenter.
    #[arg(long, value_name = "N")]
    pub plan_servers: Option<usize>,
    /// plan: timed runs (the median is reported).
    #[arg(long, value_name = "N")]
    pub plan_runs: Option<usize>,
}

/// The arguments each benchmark gets from `bench all`'s options.
#[derive(Clone, Debug)]
pub struct AllSettings {
    pub benchmarks: Vec<Benchmark>,
    pub install: install::InstallBenchArgs,
    pub rollout: rollout::RolloutBenchArgs,
    pub plan: plan::PlanBenchArgs,
}

impl AllBenchArgs {
    /// Defaults (or the quick preset), then the explicit options.
    pub fn resolve(&self) -> AllSettings {
        let mut s = AllSettings {
            benchmarks: if self.only.is_empty() {
                Benchmark::ALL.to_vec()
            } else {
                let mut b = self.only.clone();
                b.sort();
                b.dedup();
                b
            },
            install: install::InstallBenchArgs::default(),
            rollout: rollout::RolloutBenchArgs::default(),
            plan: plan::PlanBenchArgs::default(),
        };
        if self.quick {
            // About a tenth of each default: the same shapes, in seconds.
            s.install.image_mb = 5;
            s.install.runs = 3;
            s.rollout.servers = 100;
            s.rollout.shar_servers = 20;
            s.rollout.latency_ms = 20;
            s.plan.servers = 200;
            s.plan.runs = 3;
        }
        let set = |slot: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut s.install.image_mb, self.image_mb);
        set(&mut s.install.runs, self.install_runs);
        set(&mut s.rollout.servers, self.rollout_servers);
        set(&mut s.rollout.shar_servers, self.shar_servers);
        set(&mut s.plan.servers, self.plan_servers);
        set(&mut s.plan.runs, self.plan_runs);
        if let Some(v) = self.latency_ms {
            s.rollout.latency_ms = v;
        }
        if let Some(b) = self.backend {
            s.rollout.backend = b;
        }
        s
    }
}

/// What `bench all` produced: the combined JSON object and whether every
/// benchmark ran.
#[derive(Clone, Debug)]
pub struct AllReport {
    pub value: Value,
    pub all_ok: bool,
}

/// Run the selected benchmarks in turn, each in its own process (this
/// binary, `bench <name> ...`), so each one's peak RSS and allocator state
/// are its own: in one process the plan benchmark's peak would include the
/// install benchmark's buffers. A benchmark that fails (say, `curl` missing
/// for `install`) is recorded as `{"error": ...}` and the others still run.
pub async fn run_all(settings: &AllSettings) -> AllReport {
    let started = Instant::now();
    let load_before = load_average();
    let mut out = serde_json::Map::new();
    let mut all_ok = true;
    for b in &settings.benchmarks {
        let argv = match b {
            Benchmark::Install => settings.install.to_argv(),
            Benchmark::Rollout => settings.rollout.to_argv(),
            Benchmark::Plan => settings.plan.to_argv(),
        };
        let value = run_in_own_process(*b, &argv).await.unwrap_or_else(|e| {
            all_ok = false;
            json!({ "error": e })
        });
        out.insert(b.as_str().to_string(), value);
    }
    let mut machine = machine();
    machine["load_before"] = json!(load_before);
    machine["load_after"] = json!(load_average());
    out.insert("machine".to_string(), machine);
    out.insert(
        "elapsed_s".to_string(),
        json!(round(started.elapsed().as_secs_f64(), 1)),
    );
    AllReport {
        value: Value::Object(out),
        all_ok,
    }
}

/// `agentsadm bench <name> <argv>` as a child process: its one JSON object,
/// or what went wrong (its last stderr line, or why it could not start).
async fn run_in_own_process(bench: Benchmark, argv: &[String]) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| {
        format!(
            "cannot find this program to run bench {}: {e}",
            bench.as_str()
        )
    })?;
    let output = tokio::process::Command::new(&exe)
        .arg("bench")
        .arg(bench.as_str())
        .args(argv)
        .env_remove("AGENTSADM_TEST_CRASH_AT")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run {} bench {}: {e}", exe.display(), bench.as_str()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        let last = last.unwrap_or("no message");
        // The child's own `agentsadm: error: ` prefix is noise in a table.
        let last = last.strip_prefix("agentsadm: error: ").unwrap_or(last);
        return Err(last.to_string());
    }
    serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "bench {} printed something other than one JSON object: {e}",
            bench.as_str()
        )
    })
}

/// The machine the figures come from: CPU, cores, OS, build.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string());
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "os": std::env::consts::OS,
        "kernel": kernel,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "agentsadm": env!("CARGO_PKG_VERSION"),
    })
}

/// `agentsadm update COMPONENTS -y` on the simulator as the binary runs it
/// (the datacenter lock, the plan made again under it, execution, the
/// history entry in SAPI only: no journal in the developer's home), for
/// the benchmarks that time a rollout through the one run (`bench
/// rollout` on the simulator, `bench gate`). The transport waits for a
/// new cn-agent's report in 5-50 ms pauses (the simulated one restarts
/// at once).
pub(crate) struct SimUpdate {
    pub components: Vec<agentsadm_types::component::ComponentName>,
    pub servers: agentsadm_plan::ServerSelection,
    pub rollout: agentsadm_plan::RolloutPolicy,
    pub options: agentsadm_orchestrate::execute::ExecOptions,
    /// The lock's settle pause, when not the binary's (a benchmark timing
    /// the whole run, lock included, shortens it).
    pub settle: Option<std::time::Duration>,
}

/// What a [`SimUpdate`] ran: its plan, and how long
/// [`agentsadm_orchestrate::run::Run::go`] took in all, in seconds.
pub(crate) struct SimUpdated {
    pub plan: agentsadm_plan::Plan,
    pub wall_s: f64,
}

impl SimUpdate {
    /// Run it on `dc`, reporting to `reporter`; a run that did not execute
    /// or did not succeed everywhere fails the benchmark (`what` names it).
    pub(crate) async fn run(
        &self,
        dc: &agentsadm_sim::SimDc,
        reporter: &dyn agentsadm_orchestrate::report::Reporter,
        what: &str,
    ) -> anyhow::Result<SimUpdated> {
        use agentsadm_orchestrate::images::ImageChoice;
        use agentsadm_orchestrate::run::{Run, RunOutcome, RunSettings};
        use agentsadm_orchestrate::session::{RequestPlanner, Session};
        use agentsadm_plan::{ComponentSelection, Operation, Request};

        let apis = dc.apis();
        let catalog = dc.catalog().clone();
        let settings = RunSettings {
            yes: true,
            rollout: self.rollout,
            options: self.options.clone(),
            ..RunSettings::default()
        };
        let mut run = Run::new(&apis, &catalog, &settings, reporter, "update");
        run.transport.confirm_poll = (
            std::time::Duration::from_millis(5),
            std::time::Duration::from_millis(50),
        );
        if let Some(settle) = self.settle {
            run.lock.settle = settle;
        }
        if let Some(h) = run.history.as_mut() {
            h.local = None;
        }
        let planner = RequestPlanner {
            session: Session {
                apis: &apis,
                catalog: &catalog,
                updates: None,
            },
            request: Request {
                operation: Operation::Update,
                components: ComponentSelection::Named(self.components.clone()),
                servers: self.servers.clone(),
                exclude: Vec::new(),
            },
            choice: ImageChoice::Latest,
            options: settings.plan_options(),
            durations: None,
            overlay: None,
        };
        let t = Instant::now();
        let outcome = run
            .go(&planner, &rollout::Unattended, std::future::pending())
            .await?;
        let wall_s = t.elapsed().as_secs_f64();
        let RunOutcome::Executed {
            planned: plan,
            report,
        } = outcome
        else {
            anyhow::bail!("benchmark {what} did not run: {outcome:?}");
        };
        anyhow::ensure!(
            report.all_succeeded(),
            "benchmark {what} did not succeed everywhere:\n{}",
            report.render(&plan)
        );
        Ok(SimUpdated { plan, wall_s })
    }
}

/// The CPU time (user + system) this process has used so far, all its
/// threads together: what a benchmark's work cost whatever else the
/// machine runs, where its wall time is not.
pub fn process_cpu() -> Option<std::time::Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is a valid out-pointer for one rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// The 1-minute load average (Linux), for the table's footnote: other work
/// on the machine skews absolute times, less so the ratios.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// A number from a benchmark's object, formatted.
fn num(v: &Value, key: &str, unit: &str) -> String {
    match v.get(key).and_then(Value::as_f64) {
        Some(x) => format!("{x}{unit}"),
        None => "-".to_string(),
    }
}

/// The rollout benchmark's scheduling-from-history rows (issue 24). The
/// bound and the plan's expected finish follow from the latency model
/// (seeded persistent speed factors times per-install noise); what is
/// measured is the wall time against them.
fn history_rows(v: &Value) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if v.get("history_wall_over_bound_20")
        .is_none_or(Value::is_null)
    {
        return rows;
    }
    let h = v.get("history").unwrap_or(&Value::Null);
    let model = "latency model: speed x noise";
    rows.push((
        format!(
            "wall / bound, 20-wide, no history, {} servers ({model})",
            num(h, "servers", "")
        ),
        num(v, "no_history_wall_over_bound_20", "x"),
    ));
    rows.push((
        format!("wall / bound, 20-wide, with the first run's history ({model})"),
        num(v, "history_wall_over_bound_20", "x"),
    ));
    rows.push((
        "plan's expected finish / wall, with history".into(),
        num(v, "history_expected_finish_over_wall", "x"),
    ));
    rows
}

/// The table `bench all` prints: one row per measure, with what it means.
pub fn render_table(value: &Value) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |bench: &str, measure: String, result: String| {
        rows.push(vec![bench.to_string(), measure, result]);
    };
    for b in Benchmark::ALL {
        let Some(v) = value.get(b.as_str()) else {
            continue;
        };
        let name = b.as_str();
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            row(name, "failed".into(), e.to_string());
            continue;
        }
        match b {
            Benchmark::Install => {
                let mb = num(v, "image_mb", " MB");
                row(
                    name,
                    format!("agentsadm gz install, {mb} image"),
                    num(v, "agentsadm_s", " s"),
                );
                row(
                    name,
                    "cn-agent path (curl, openssl, tar)".into(),
                    num(v, "cn_agent_path_s", " s"),
                );
                row(name, "bare tar -xzf".into(), num(v, "bare_tar_s", " s"));
                row(
                    name,
                    "speedup vs cn-agent path".into(),
                    num(v, "speedup_vs_cn_agent", "x"),
                );
                row(
                    name,
                    "agentsadm / bare tar".into(),
                    num(v, "ratio_vs_bare_tar", "x"),
                );
                for (key, fs) in [("realistic", "disk"), ("realistic_tmpfs", "tmpfs")] {
                    let Some(r) = v.get(key) else { continue };
                    let what = format!("cn-agent shape, {} files, {fs}", num(r, "files", ""));
                    if let Some(e) = r.get("error").and_then(Value::as_str) {
                        row(name, format!("cn-agent shape, {fs}"), e.to_string());
                        continue;
                    }
                    row(
                        name,
                        format!("{what}: agentsadm / cn-agent path / bare tar"),
                        format!(
                            "{} / {} / {}",
                            num(r, "agentsadm_s", " s"),
                            num(r, "cn_agent_path_s", " s"),
                            num(r, "bare_tar_s", " s")
                        ),
                    );
                    row(
                        name,
                        format!("{what}: speedup vs cn-agent, agentsadm / bare tar"),
                        format!(
                            "{}, {}",
                            num(r, "speedup_vs_cn_agent", "x"),
                            num(r, "ratio_vs_bare_tar", "x")
                        ),
                    );
                }
            }
            Benchmark::Rollout => {
                let backend = v.get("backend").and_then(Value::as_str).unwrap_or("?");
                let latency = num(v, "latency_ms", " ms");
                for m in v
                    .get("modes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    row(
                        name,
                        format!(
                            "{} {} servers x {} components, {}-wide",
                            m.get("mode").and_then(Value::as_str).unwrap_or("?"),
                            num(m, "servers", ""),
                            num(m, "components", ""),
                            num(m, "concurrency", ""),
                        ),
                        format!(
                            "{} (ideal {}, {} servers/s)",
                            num(m, "wall_s", " s"),
                            num(m, "ideal_s", " s"),
                            num(m, "servers_per_s", ""),
                        ),
                    );
                }
                row(
                    name,
                    "wall / ideal, 20-wide".into(),
                    num(v, "wall_over_ideal_20", "x"),
                );
                if v.get("executor_only_wall_over_ideal_20")
                    .is_some_and(|x| !x.is_null())
                {
                    row(
                        name,
                        "wall / ideal, 20-wide, executor only (fake transport)".into(),
                        num(v, "executor_only_wall_over_ideal_20", "x"),
                    );
                }
                row(
                    name,
                    "speedup 20-wide vs 5-wide (model figure: 4x by construction)".into(),
                    num(v, "speedup_vs_5_wide", "x"),
                );
                row(
                    name,
                    "speedup 20-wide one component vs shar-style (model figure)".into(),
                    num(v, "speedup_vs_shar", "x"),
                );
                for (measure, result) in history_rows(v) {
                    row(name, measure, result);
                }
                row(
                    name,
                    "backend, install latency".into(),
                    format!("{backend}, {latency}"),
                );
            }
            Benchmark::Plan => {
                row(
                    name,
                    format!(
                        "plan {} servers x {} components",
                        num(v, "servers", ""),
                        num(v, "components", "")
                    ),
                    num(v, "plan_ms", " ms"),
                );
                row(
                    name,
                    "peak RSS (input included)".into(),
                    num(v, "peak_rss_mb", " MB"),
                );
            }
        }
    }
    let mut text = table(&["BENCHMARK", "MEASURE", "RESULT"], &rows);
    if let Some(m) = value.get("machine") {
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
        let load = |k: &str| {
            m.get(k)
                .and_then(Value::as_f64)
                .map(|l| format!("{l:.2}"))
                .unwrap_or_else(|| "?".into())
        };
        let cores = m
            .get("cores")
            .and_then(Value::as_u64)
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".into());
        text.push_str(&format!(
            "\nmachine: {}, {cores} cores, {} {}; {} build of agentsadm {}; load {} before, {} after; {} s in all\n",
            s("cpu"),
            s("os"),
            s("kernel"),
            s("build"),
            s("agentsadm"),
            load("load_before"),
            load("load_after"),
            value
                .get("elapsed_s")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_applies_quick_then_explicit_options() {
        let a = AllBenchArgs {
            quick: true,
            rollout_servers: Some(40),
            only: vec![Benchmark::Plan, Benchmark::Install, Benchmark::Plan],
            ..Default::default()
        };
        let s = a.resolve();
        assert_eq!(s.benchmarks, vec![Benchmark::Install, Benchmark::Plan]);
        assert_eq!(s.rollout.servers, 40);
        assert_eq!(s.rollout.shar_servers, 20);
        assert_eq!(s.install.image_mb, 5);
        let d = AllBenchArgs::default().resolve();
        assert_eq!(d.benchmarks, Benchmark::ALL.to_vec());
        assert_eq!(d.plan.servers, plan::PlanBenchArgs::default().servers);
    }

    #[test]
    fn table_has_a_row_per_measure_and_names_failures() {
        let v = json!({
            "install": {"error": "bench install needs `curl` in PATH"},
            "plan": {"servers": 10, "components": 3, "plan_ms": 1.5, "peak_rss_mb": 20.0},
            "rollout": {
                "backend": "fake", "latency_ms": 5,
                "modes": [{"mode": "one-component", "servers": 40, "components": 1,
                           "concurrency": 20, "wall_s": 0.011, "ideal_s": 0.01, "servers_per_s": 3600.0}],
                "wall_over_ideal_20": 1.1, "speedup_vs_5_wide": 3.9, "speedup_vs_shar": 40.0,
                "executor_only_wall_over_ideal_20": null
            },
            "machine": {"cpu": "x", "cores": 2, "os": "linux", "kernel": "6", "build": "release",
                        "agentsadm": "0.1.0", "load_before": 0.5, "load_after": 1.0},
            "elapsed_s": 3.0
        });
        let t = render_table(&v);
        assert!(t.starts_with("BENCHMARK"), "{t}");
        assert!(t.contains("install    failed"), "{t}");
        assert!(
            t.contains("one-component 40 servers x 1 components, 20-wide"),
            "{t}"
        );
        assert!(t.contains("1.5 ms"), "{t}");
        assert!(!t.contains("executor only"), "{t}");
        assert!(t.contains("2 cores"), "{t}");
        // Install before rollout before plan, whatever the object's order.
        let (i, r, p) = (
            t.find("install").unwrap(),
            t.find("rollout").unwrap(),
            t.find("plan ").unwrap(),
        );
        assert!(i < r && r < p, "{t}");
    }
}
