//! Logging: human-readable lines on stderr (`-v`), and bunyan-style JSON
//! lines in `--log-file`, the format Triton operators read with `bunyan`.
//!
//! A bunyan record is one JSON object per line with `v: 0`, `level` (10 trace
//! .. 60 fatal), `name`, `hostname`, `pid`, `time` (ISO 8601) and `msg`; any
//! structured fields of the event are added as top-level keys.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// A tracing layer writing bunyan JSON lines to a file.
pub struct BunyanLayer {
    file: Mutex<File>,
    name: String,
    hostname: String,
}

impl BunyanLayer {
    pub fn open(path: &Path, name: &str) -> std::io::Result<BunyanLayer> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(BunyanLayer {
            file: Mutex::new(file),
            name: name.to_string(),
            hostname: hostname(),
        })
    }
}

/// This machine's name: `/etc/nodename` on SmartOS, else gethostname(3).
pub fn hostname() -> String {
    if let Some(n) = std::fs::read_to_string("/etc/nodename")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
    {
        return n;
    }
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        if let Ok(n) = std::str::from_utf8(&buf[..end])
            && !n.is_empty()
        {
            return n.to_string();
        }
    }
    "localhost".to_string()
}

/// The bunyan `component` of an event: its `component` field if it has
/// one, else its module without the crate (`orchestrate/execute`).
fn component_of(target: &str) -> String {
    let t = target.strip_prefix("agentsadm::").unwrap_or(target);
    t.replace("::", "/")
}

/// The state directory this process uses instead of the account's (see
/// [`use_state_dir`]).
static STATE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Make this process keep its run logs and history under `dir` instead of
/// the account's (or the headnode's) state directory, from now on. For a
/// process that runs commands against a datacenter of its own (the demo):
/// the history of another datacenter whose servers have the same UUIDs
/// would decide its canaries. The first call wins; the answer says whether
/// `dir` is the one in use.
pub fn use_state_dir(dir: PathBuf) -> bool {
    STATE_DIR.get_or_init(|| dir.clone()) == &dir
}

/// The directory [`use_state_dir`] set, if it was called.
pub fn own_state_dir() -> Option<&'static Path> {
    STATE_DIR.get().map(PathBuf::as_path)
}

/// Where an orchestrator run's log goes by default: the directory
/// [`use_state_dir`] set, else on a headnode `/var/log/agentsadm/logs`,
/// elsewhere `$XDG_STATE_HOME/agentsadm/logs`
/// (`~/.local/state/agentsadm/logs`).
pub fn default_log_dir() -> Option<PathBuf> {
    if let Some(dir) = STATE_DIR.get() {
        return Some(dir.join("agentsadm/logs"));
    }
    if Path::new("/lib/sdc/config.sh").exists() {
        return Some(PathBuf::from("/var/log/agentsadm/logs"));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(state.join("agentsadm/logs"))
}

/// `<dir>/<timestamp>-<pid>-<command>.log`, the timestamp in UTC to the
/// second (`20261123T212713Z`), so that names sort by time.
pub fn run_log_path(dir: &Path, command: &str, now: std::time::SystemTime) -> PathBuf {
    let stamp: String = humantime::format_rfc3339_seconds(now)
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    dir.join(format!("{stamp}-{}-{command}.log", std::process::id()))
}

/// Bunyan's numeric levels.
pub fn bunyan_level(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 10,
        Level::DEBUG => 20,
        Level::INFO => 30,
        Level::WARN => 40,
        Level::ERROR => 50,
    }
}

struct JsonVisitor(serde_json::Map<String, serde_json::Value>);

impl Visit for JsonVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Documents (the plan, the summary) are logged as JSON text and kept
        // as JSON in the record.
        let v = if value.starts_with('{') || value.starts_with('[') {
            serde_json::from_str(value).unwrap_or_else(|_| value.into())
        } else {
            value.into()
        };
        self.0.insert(field.name().to_string(), v);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}").into());
    }
}

impl<S: Subscriber> Layer<S> for BunyanLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut visitor = JsonVisitor(serde_json::Map::new());
        event.record(&mut visitor);
        let msg = visitor
            .0
            .remove("message")
            .and_then(|m| m.as_str().map(str::to_string))
            .unwrap_or_default();
        let mut rec = serde_json::Map::new();
        rec.insert("name".into(), self.name.clone().into());
        rec.insert("hostname".into(), self.hostname.clone().into());
        rec.insert("pid".into(), std::process::id().into());
        rec.insert(
            "level".into(),
            bunyan_level(event.metadata().level()).into(),
        );
        rec.insert(
            "component".into(),
            component_of(event.metadata().target()).into(),
        );
        for (k, v) in visitor.0 {
            rec.insert(k, v);
        }
        rec.insert("msg".into(), msg.into());
        rec.insert(
            "time".into(),
            humantime::format_rfc3339_millis(std::time::SystemTime::now())
                .to_string()
                .into(),
        );
        rec.insert("v".into(), 0.into());
        if let Ok(line) = serde_json::to_string(&rec)
            && let Ok(mut f) = self.file.lock()
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The log file of the command this process runs, for the one JSON
/// document it prints (`"log": PATH`, see [`crate::output::Output::json`]).
/// Set once the log is open; cleared when the command ends (the demo runs
/// several commands in one process).
static RUN_LOG: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Record (or clear) the current command's log file.
pub fn set_run_log(path: Option<PathBuf>) {
    if let Ok(mut l) = RUN_LOG.lock() {
        *l = path;
    }
}

/// The current command's log file, if it has one.
pub fn run_log() -> Option<PathBuf> {
    RUN_LOG.lock().ok().and_then(|l| l.clone())
}

/// Target of events meant for the log file only: the run's record (command
/// line, plan, steps, summary, the final error), which the command line
/// shows in its own form on stdout and stderr.
pub const FILE_ONLY_TARGET: &str = "agentsadm::log_file_only";

/// Install the global subscriber. `verbosity` 0 shows warnings, 1 info, 2+
/// debug on stderr; the log file always gets debug and above.
pub fn init(verbosity: u8, log_file: Option<&Path>) -> std::io::Result<()> {
    let stderr_level = match verbosity {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let stderr_filter = EnvFilter::try_from_env("AGENTSADM_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("agentsadm={stderr_level}")));
    let stderr_layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // tracing-subscriber colours by default whatever stderr is: a
        // WARN line redirected to a file would carry escape sequences.
        .with_ansi(crate::output::colour_on_stderr())
        .with_target(false)
        .with_filter(stderr_filter)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() != FILE_ONLY_TARGET
        }));
    let file_layer = match log_file {
        Some(p) => {
            Some(BunyanLayer::open(p, "agentsadm")?.with_filter(EnvFilter::new("agentsadm=debug")))
        }
        None => None,
    };
    let _ = tracing_subscriber::registry()
        .with(stderr_layer)
        .with(file_layer)
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_bunyan_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.json");
        let layer = BunyanLayer::open(&path, "agentsadm").unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(server = "cn1", "install failed");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let rec: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(rec["v"], 0);
        assert_eq!(rec["level"], 40);
        assert_eq!(rec["msg"], "install failed");
        assert_eq!(rec["server"], "cn1");
        assert!(rec["time"].as_str().unwrap().ends_with('Z'));
    }
}
