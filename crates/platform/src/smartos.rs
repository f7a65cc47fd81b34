//! The real SmartOS global zone: SMF and sysinfo through their commands,
//! run as child processes the runtime awaits, and the SDC config from
//! `/lib/sdc/config.sh -json`.

use std::path::{Path, PathBuf};
use std::process::Output;

use futures::future::BoxFuture;

use super::Platform;

use super::PlatformError;

use super::PlatformFuture;

use super::SdcConfig;

use super::ServiceHealth;

use super::ServiceState;

use super::Sysinfo;

const SVCCFG: &str = "/usr/sbin/svccfg";
const SVCADM: &str = "/usr/sbin/svcadm";
const SVCS: &str = "/usr/bin/svcs";
const SYSINFO: &str = "/usr/bin/sysinfo";
const SDC_CONFIG: &str = "/lib/sdc/config.sh";

/// The installed copy of `smf/agentsadm-install.xml`.
pub const INSTALL_SERVICE_MANIFEST: &str = include_str!("../../../smf/agentsadm-install.xml");
/// Its FMRI.
pub const INSTALL_SERVICE_FMRI: &str = "svc:/smartdc/agentsadm-install:default";
/// Where the install service's manifest is written before its first import.
const INSTALL_SERVICE_MANIFEST_PATH: &str = "/opt/smartdc/agents/smf/agentsadm-install.xml";

/// The real global zone: runs SMF and sysinfo commands.
#[derive(Debug, Default)]
pub struct SmartOs;

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::iter::once(cmd)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ")
}

async fn run(cmd: &str, args: &[&str]) -> Result<Output, PlatformError> {
    tokio::process::Command::new(cmd)
        .args(args)
        .output()
        .await
        .map_err(|err| PlatformError::Spawn {
            command: command_line(cmd, args),
            err,
        })
}

async fn run_ok(cmd: &str, args: &[&str]) -> Result<Output, PlatformError> {
    let out = run(cmd, args).await?;
    if !out.status.success() {
        return Err(PlatformError::Command {
            command: command_line(cmd, args),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// `/lib/sdc/config.sh -json`, when this is a Triton global zone. Blocking
/// (it waits for the script): for synchronous callers such as the command
/// line's option defaults; async code asks [`Platform::sdc_config`].
pub fn read_sdc_config() -> Option<SdcConfig> {
    let script = Path::new(SDC_CONFIG);
    if !script.exists() {
        return None;
    }
    let out = std::process::Command::new("/bin/bash")
        .arg(script)
        .arg("-json")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

impl Platform for SmartOs {
    fn name(&self) -> &'static str {
        "smartos"
    }

    fn sysinfo(&self) -> PlatformFuture<'_, Sysinfo> {
        Box::pin(async {
            let out = run_ok(SYSINFO, &[]).await?;
            parse_sysinfo(&out.stdout).map_err(|reason| PlatformError::Invalid {
                path: PathBuf::from(SYSINFO),
                reason,
            })
        })
    }

    fn sdc_config(&self) -> BoxFuture<'_, Option<SdcConfig>> {
        Box::pin(super::blocking(read_sdc_config))
    }

    fn smf_import<'a>(&'a self, manifest: &'a Path) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            let p = manifest.to_string_lossy();
            run_ok(SVCCFG, &["import", &p]).await.map(|_| ())
        })
    }

    fn smf_delete<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            if self.smf_state(fmri).await?.is_none() {
                return Ok(());
            }
            // A disable that fails (already in maintenance) must not stop the delete.
            let _ = run(SVCADM, &["disable", "-s", fmri]).await;
            let service = super::fmri_service(fmri);
            run_ok(SVCCFG, &["delete", &service]).await.map(|_| ())
        })
    }

    fn smf_enable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move { run_ok(SVCADM, &["enable", fmri]).await.map(|_| ()) })
    }

    fn smf_disable<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move { run_ok(SVCADM, &["disable", "-s", fmri]).await.map(|_| ()) })
    }

    fn smf_restart<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            // `svcadm restart` leaves an instance in maintenance there;
            // `clear` is what starts it again.
            let verb = match self.smf_state(fmri).await? {
                Some(ServiceState::Maintenance) => "clear",
                _ => "restart",
            };
            run_ok(SVCADM, &[verb, fmri]).await.map(|_| ())
        })
    }

    fn caller_service(&self) -> BoxFuture<'_, Option<String>> {
        Box::pin(async {
            let pid = std::process::id().to_string();
            let ps = run_ok("/usr/bin/ps", &["-o", "ctid=", "-p", &pid])
                .await
                .ok()?;
            let ctid = parse_ctid(&String::from_utf8_lossy(&ps.stdout))?.to_string();
            let ct = run_ok("/usr/bin/ctstat", &["-v", "-i", &ctid]).await.ok()?;
            contract_service(&String::from_utf8_lossy(&ct.stdout))
        })
    }

    fn smf_state<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceState>> {
        Box::pin(async move {
            let out = run(SVCS, &["-H", "-o", "state", fmri]).await?;
            if !out.status.success() {
                return Ok(None);
            }
            Ok(Some(ServiceState::parse(&String::from_utf8_lossy(
                &out.stdout,
            ))))
        })
    }

    fn smf_health<'a>(&'a self, fmri: &'a str) -> PlatformFuture<'a, Option<ServiceHealth>> {
        Box::pin(async move {
            let mut args = super::svcs::HEALTH_ARGS.to_vec();
            args.push(fmri);
            let out = run(SVCS, &args).await?;
            if !out.status.success() {
                return Ok(None);
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let line = super::svcs::parse_health(&text).ok_or_else(|| PlatformError::Invalid {
                path: PathBuf::from(SVCS),
                reason: format!("unexpected output for {fmri}: {}", text.trim()),
            })?;
            let state = line.state.clone();
            let explanation = if state == ServiceState::Online {
                None
            } else {
                // `svcs -x` says why (the start method's exit, the log file);
                // without it the state alone is still reported.
                run(SVCS, &["-x", fmri])
                    .await
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                    .filter(|t| !t.is_empty())
            };
            Ok(Some(ServiceHealth {
                run: Some(line.run()),
                next_state: line.next_state,
                state,
                explanation,
            }))
        })
    }

    fn refresh_sysinfo(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {
            let _ = run(SYSINFO, &["-u"]).await;
        })
    }

    fn launch_transient_job<'a>(&'a self, job: &'a Path) -> PlatformFuture<'a, ()> {
        Box::pin(async move {
            let manifest = Path::new(INSTALL_SERVICE_MANIFEST_PATH);
            if self.smf_state(INSTALL_SERVICE_FMRI).await?.is_none() {
                if let Some(dir) = manifest.parent() {
                    tokio::fs::create_dir_all(dir)
                        .await
                        .map_err(|err| PlatformError::Write {
                            path: dir.to_path_buf(),
                            err,
                        })?;
                }
                tokio::fs::write(manifest, INSTALL_SERVICE_MANIFEST)
                    .await
                    .map_err(|err| PlatformError::Write {
                        path: manifest.to_path_buf(),
                        err,
                    })?;
                self.smf_import(manifest).await?;
            }
            let value = format!("astring: {}", job.display());
            run_ok(
                SVCCFG,
                &[
                    // The manifest defines `config` on the service, not
                    // the instance: setprop on the instance would fail.
                    "-s",
                    &super::fmri_service(INSTALL_SERVICE_FMRI),
                    "setprop",
                    "config/job",
                    "=",
                    &value,
                ],
            )
            .await?;
            run_ok(SVCADM, &["refresh", INSTALL_SERVICE_FMRI]).await?;
            // A transient service runs its start method once per enable.
            let _ = run(SVCADM, &["disable", "-s", INSTALL_SERVICE_FMRI]).await;
            run_ok(SVCADM, &["enable", INSTALL_SERVICE_FMRI])
                .await
                .map(|_| ())
        })
    }
}

/// The output of `/usr/bin/sysinfo` (JSON) as the installer reads it, or
/// why it cannot be.
pub fn parse_sysinfo(stdout: &[u8]) -> Result<Sysinfo, String> {
    let v: serde_json::Value = serde_json::from_slice(stdout).map_err(|e| e.to_string())?;
    Sysinfo::from_json(&v).ok_or_else(|| "no UUID in sysinfo output".to_string())
}

/// The contract ID `ps -o ctid= -p PID` prints (`-` or nothing for a
/// process outside any contract).
pub fn parse_ctid(ps: &str) -> Option<u64> {
    let ctid = ps.trim();
    if ctid.is_empty() || !ctid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ctid.parse().ok()
}

/// The `service fmri:` of `ctstat -v` output (a process contract started by
/// SMF names its service instance there).
pub fn contract_service(ctstat: &str) -> Option<String> {
    ctstat.lines().find_map(|l| {
        let (key, value) = l.trim().split_once(':')?;
        (key.trim() == "service fmri")
            .then(|| value.trim().to_string())
            .filter(|v| v.starts_with("svc:/"))
    })
}

#[cfg(test)]
mod contract_tests {
    use super::contract_service;

    #[test]
    fn reads_the_contract_service() {
        let out = "CTID    ZONEID  TYPE    STATE   HOLDER  EVENTS  QTIME   NTIME\n\
                   61      0       process owned   7       0       -       -\n\
                   \tcookie:                0x20\n\
                   \tservice fmri:          svc:/smartdc/agent/cn-agent:default\n\
                   \tservice fmri ctid:     61\n";
        assert_eq!(
            contract_service(out).as_deref(),
            Some("svc:/smartdc/agent/cn-agent:default")
        );
        assert_eq!(contract_service("CTID ZONEID\n"), None);
    }
}
