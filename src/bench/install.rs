//! `agentsadm bench install`: agentsadm against cn-agent's download path and a
//! bare `tar -xzf`.
//!
//! One N-MB apm image (incompressible payload, gzip, no hooks so the data
//! path is what is measured) is served by a loopback IMGAPI. In the same run,
//! interleaved, each of these is timed `--runs` times and the median kept:
//! - `agentsadm`: a full `gz install` into a fresh rooted directory (manifest
//!   GET, streamed download with sha1/sha256/MD5 and unpack in one pass,
//!   verify, journaled swap, SMF import) with SAPI and CNAPI off;
//! - `cn_agent_path`: what cn-agent's `agent_install` runs today (agent-install.md
//!   §3.3): `curl` the manifest, `curl` the file to disk, `openssl sha1`,
//!   `tar -ztf <file> <name>/image_uuid`, `tar -zxf` into a temp dir, `mv`
//!   into place;
//! - `bare_tar`: `tar -xzf` of a local copy of the same file.
//!
//! The output is one JSON object of times and ratios; no goal is checked
//! here (machines are shared and noisy).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use crate::catalog::Catalog;
use crate::gz::fetch::ImageSource;
use crate::gz::session::{GzSession, GzSettings};
use crate::ids::ServerUuid;
use crate::imagebuild::{self, Hooks, ImageSpec};
use crate::platform::Sysinfo;
use crate::sim::standin::ImgapiStandIn;

/// Options of `agentsadm bench install`.
#[derive(clap::Args, Clone, Debug)]
pub struct InstallBenchArgs {
    /// Size of the image's payload in MB.
    #[arg(long, default_value_t = 50)]
    pub image_mb: usize,
    /// Runs of each path (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
}

impl InstallBenchArgs {
    /// These settings as `bench install` options (for `bench all`, which
    /// runs each benchmark in its own process).
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "--image-mb".into(),
            self.image_mb.to_string(),
            "--runs".into(),
            self.runs.to_string(),
        ]
    }
}

impl Default for InstallBenchArgs {
    fn default() -> Self {
        InstallBenchArgs {
            image_mb: 50,
            runs: 5,
        }
    }
}

/// Run the benchmark and return the JSON object it prints.
pub async fn run(args: &InstallBenchArgs) -> anyhow::Result<serde_json::Value> {
    if args.runs == 0 || args.image_mb == 0 {
        bail!("--runs and --image-mb must be at least 1");
    }
    for tool in ["curl", "openssl", "tar"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("bench install needs `{tool}` in PATH (it times cn-agent's download path)");
        }
    }
    let work = std::env::temp_dir().join(format!(
        "agentsadm-bench-install-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let result = measure(args, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    result
}

async fn measure(args: &InstallBenchArgs, work: &Path) -> anyhow::Result<serde_json::Value> {
    let catalog = Catalog::builtin();
    let component = catalog.require("vm-agent")?;
    let mut spec = ImageSpec::for_component(component, "1.0.0");
    spec.payload_bytes = args.image_mb * 1024 * 1024;
    spec.hooks = Hooks::default();
    let image = imagebuild::build(&spec);
    let uuid = image.manifest.uuid;
    let imgapi = ImgapiStandIn::start().await?;
    imgapi.publish(&image);
    let local = work.join("image.tgz");
    std::fs::write(&local, &image.file)?;
    let expected_sha1 = image.manifest.files[0].sha1.clone();

    let mut agentsadm = Vec::new();
    let mut cn_agent = Vec::new();
    let mut bare = Vec::new();
    for i in 0..args.runs {
        // Interleaved, so drift in machine load hits all three alike.
        let root = work.join(format!("root-{i}"));
        agentsadm.push(time_agentsadm(&root, &imgapi.url(), uuid).await?);
        let _ = std::fs::remove_dir_all(&root);

        let dir = work.join(format!("cn-{i}"));
        cn_agent.push(time_cn_agent(
            &dir,
            &imgapi.url(),
            uuid,
            &expected_sha1,
            &spec.package,
        )?);
        let _ = std::fs::remove_dir_all(&dir);

        let dir = work.join(format!("bare-{i}"));
        std::fs::create_dir_all(&dir)?;
        let t = Instant::now();
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(&local)
                .arg("-C")
                .arg(&dir),
        )?;
        bare.push(t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
    }
    let a = median(&mut agentsadm);
    let c = median(&mut cn_agent);
    let b = median(&mut bare);
    Ok(json!({
        "image_mb": args.image_mb,
        "agentsadm_s": round(a),
        "cn_agent_path_s": round(c),
        "bare_tar_s": round(b),
        "speedup_vs_cn_agent": round(c / a),
        "ratio_vs_bare_tar": round(a / b),
    }))
}

async fn time_agentsadm(
    root: &Path,
    imgapi: &str,
    uuid: crate::ids::ImageUuid,
) -> anyhow::Result<Duration> {
    std::fs::create_dir_all(root)?;
    let sys = Sysinfo {
        uuid: ServerUuid::new_v4(),
        hostname: "bench".into(),
        headnode: false,
    };
    std::fs::write(
        root.join("sysinfo.json"),
        serde_json::to_vec(&sys.to_json())?,
    )?;
    let mut settings = GzSettings::new(root);
    settings.no_sapi = true;
    settings.no_cnapi = true;
    settings.imgapi_url = Some(imgapi.to_string());
    let t = Instant::now();
    let mut session = GzSession::open(settings, true).await?;
    let result = session.install(&[ImageSource::Imgapi(uuid)]).await;
    let elapsed = t.elapsed();
    if let Some(e) = result.error {
        bail!("agentsadm install failed at {}: {}", e.step, e.message);
    }
    Ok(elapsed)
}

/// cn-agent's `getAgentImage` + apm install, as the commands it runs.
fn time_cn_agent(
    dir: &Path,
    imgapi: &str,
    uuid: crate::ids::ImageUuid,
    sha1: &str,
    package: &str,
) -> anyhow::Result<Duration> {
    let installdir = dir.join("node_modules");
    std::fs::create_dir_all(&installdir)?;
    let file = dir.join(format!("{uuid}.file"));
    let tgz: PathBuf = dir.join(format!("{uuid}.tar.gz"));
    let unpack = dir.join("apm-tmp/package");
    let t = Instant::now();
    run_ok(
        Command::new("curl")
            .args(["-f", "-sS", "-o"])
            .arg(dir.join("manifest.json"))
            .arg(format!("{imgapi}/images/{uuid}")),
    )?;
    run_ok(
        Command::new("curl")
            .args(["-f", "-sS", "-o"])
            .arg(&file)
            .arg(format!("{imgapi}/images/{uuid}/file")),
    )?;
    let out = run_ok(Command::new("openssl").arg("sha1").arg(&file))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let got = text.split(' ').nth(1).map(str::trim).unwrap_or_default();
    if got != sha1 {
        bail!("cn-agent path: sha1 {got} != {sha1}");
    }
    std::fs::rename(&file, &tgz)?;
    let out = run_ok(
        Command::new("tar")
            .arg("-ztf")
            .arg(&tgz)
            .arg(format!("{package}/image_uuid")),
    )?;
    if String::from_utf8_lossy(&out.stdout).trim() != format!("{package}/image_uuid") {
        bail!("cn-agent path: {package}/image_uuid not in the tarball");
    }
    std::fs::create_dir_all(&unpack)?;
    run_ok(
        Command::new("tar")
            .arg("-zxf")
            .arg(&tgz)
            .arg("-C")
            .arg(&unpack),
    )?;
    run_ok(
        Command::new("mv")
            .arg(unpack.join(package))
            .arg(installdir.join(package)),
    )?;
    Ok(t.elapsed())
}

fn run_ok(cmd: &mut Command) -> anyhow::Result<std::process::Output> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64()
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
