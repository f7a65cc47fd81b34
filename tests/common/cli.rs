//! The `agentsadm` binary run against a simulated datacenter, the one way
//! every suite does it: the simulator's URLs in the environment, run logs
//! in a directory of the test's own (never the developer's home), no
//! progress display, no stdin, and a bound on how long a run may take.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agentsadm_sim::SimDc;

/// A command line being set up; [`agentsadm`] starts one.
pub struct Agentsadm {
    env: BTreeMap<String, Option<String>>,
    state: Option<PathBuf>,
    cwd: Option<PathBuf>,
}

/// `agentsadm` against `dc`: its IMGAPI, SAPI, CNAPI and updates server.
pub fn agentsadm(dc: &SimDc) -> Agentsadm {
    let urls = dc.urls();
    let env = [
        ("SAPI_URL", urls.sapi.clone()),
        ("CNAPI_URL", urls.cnapi.clone()),
        ("IMGAPI_URL", urls.imgapi.clone()),
        ("UPDATES_URL", urls.updates.clone()),
        ("AGENTSADM_NO_PROGRESS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Some(v)))
    .collect();
    Agentsadm {
        env,
        state: None,
        cwd: None,
    }
}

impl Agentsadm {
    /// No updates server: `--latest` looks where it looks without one.
    pub fn without_updates(mut self) -> Self {
        self.env.insert("UPDATES_URL".into(), None);
        self
    }

    /// One more variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.insert(key.into(), Some(value.into()));
        self
    }

    /// Run in `dir`: where a relative path on the command line goes.
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// Keep run logs in `dir` (`XDG_STATE_HOME`), for a test that reads them.
    pub fn state(mut self, dir: &Path) -> Self {
        self.state = Some(dir.to_path_buf());
        self
    }

    fn command(&self, state: &Path, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentsadm"));
        cmd.args(args)
            .env("XDG_STATE_HOME", state)
            .stdin(Stdio::null());
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// Run it: exit status, stdout, stderr. A run over two minutes fails
    /// the test.
    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.output(args).await;
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Run it and keep the whole [`Output`].
    pub async fn output(&self, args: &[&str]) -> Output {
        let own = tempfile::tempdir().expect("state dir");
        let state = self
            .state
            .clone()
            .unwrap_or_else(|| own.path().to_path_buf());
        tokio::time::timeout(
            Duration::from_secs(120),
            self.command(&state, args).output(),
        )
        .await
        .expect("agentsadm finishes")
        .expect("agentsadm runs")
    }

    /// [`Agentsadm::output`] for a test without an async runtime.
    pub fn output_blocking(&self, args: &[&str]) -> Output {
        let own = tempfile::tempdir().expect("state dir");
        let state = self
            .state
            .clone()
            .unwrap_or_else(|| own.path().to_path_buf());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentsadm"));
        cmd.args(args)
            .env("XDG_STATE_HOME", &state)
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.output().expect("agentsadm runs")
    }
}
