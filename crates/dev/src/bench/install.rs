//! `agentsadm bench install`: agentsadm against cn-agent's download path and a
//! bare `tar -xzf`.
//!
//! One N-MB apm image (incompressible payload, gzip, and no hook but the
//! postinstall that renders its SMF manifest, as every agent's does, so the
//! data path is what is measured) is served by a loopback IMGAPI. In the same run,
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
//! The same three paths are then timed on a realistic shape: cn-agent's
//! tree (`--shape`, 9,300 files in 1,060 directories, median 0.9 KB, from a
//! real image) with deterministic synthetic contents (JavaScript-like text
//! that gzip shrinks about as much as real code) and a `--node-mb` binary
//! as the bundled node, once in a directory on disk (`realistic`) and once
//! on tmpfs (`realistic_tmpfs`, `/dev/shm`), where per-file costs are not
//! hidden behind the disk.
//!
//! Before each timed path, `sync` writes back what earlier paths left
//! dirty, so no path pays for another's writeback.
//!
//! The output is one JSON object of times and ratios; no goal is checked
//! here (machines are shared and noisy).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::session::GzSession;
use agentsadm_gz::session::GzSettings;
use agentsadm_gz::session::PlatformKind;
use agentsadm_platform::Sysinfo;
use agentsadm_sim::imagebuild;
use agentsadm_sim::imagebuild::BuiltImage;
use agentsadm_sim::imagebuild::Hooks;
use agentsadm_sim::imagebuild::ImageSpec;
use agentsadm_sim::standin::ImgapiStandIn;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::image::Compression;

/// Options of `agentsadm bench install`.
#[derive(clap::Args, Clone, Debug)]
pub struct InstallBenchArgs {
    /// Size of the image's payload in MB.
    #[arg(long, default_value_t = 50)]
    pub image_mb: usize,
    /// Runs of each path (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// The realistic shape: `type<TAB>size<TAB>mode<TAB>path` lines (the
    /// first path component is the package directory).
    #[arg(long, default_value = DEFAULT_SHAPE)]
    pub shape: PathBuf,
    /// Size of the realistic shape's bundled node binary in MB.
    #[arg(long, default_value_t = 40)]
    pub node_mb: usize,
}

/// cn-agent's tree, from `../shared` beside the source tree.
const DEFAULT_SHAPE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/image-shapes/cn-agent-tree.tsv"
);

/// Where the "on disk" realistic run works, when it exists (`/tmp` is
/// tmpfs on some systems).
const DISK_DIR: &str = "/var/tmp";

/// Where the tmpfs realistic run works.
const TMPFS_DIR: &str = "/dev/shm";

impl InstallBenchArgs {
    /// These settings as `bench install` options (for `bench all`, which
    /// runs each benchmark in its own process).
    pub fn to_argv(&self) -> Vec<String> {
        vec![
            "--image-mb".into(),
            self.image_mb.to_string(),
            "--runs".into(),
            self.runs.to_string(),
            "--shape".into(),
            self.shape.display().to_string(),
            "--node-mb".into(),
            self.node_mb.to_string(),
        ]
    }
}

impl Default for InstallBenchArgs {
    fn default() -> Self {
        InstallBenchArgs {
            image_mb: 50,
            runs: 5,
            shape: PathBuf::from(DEFAULT_SHAPE),
            node_mb: 40,
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
    let imgapi = ImgapiStandIn::start().await?;
    imgapi.publish(&image);
    let times = compare(&image, &spec.package, work, args.runs, &imgapi).await?;
    let mut out = json!({ "image_mb": args.image_mb });
    times.write(&mut out);

    // The realistic shape, on disk and on tmpfs.
    let realistic = realistic_image(args, &spec.package);
    let disk = if Path::new(DISK_DIR).is_dir() {
        PathBuf::from(DISK_DIR)
    } else {
        std::env::temp_dir()
    };
    for (key, base) in [("realistic", Some(disk)), ("realistic_tmpfs", tmpfs_dir())] {
        let result = match (&realistic, base) {
            (Err(e), _) => json!({ "error": format!("{e:#}") }),
            (Ok(_), None) => json!({
                "error": format!("no tmpfs at {TMPFS_DIR} on this machine; only the disk run was measured")
            }),
            (Ok((img, files)), Some(base)) => {
                match run_realistic(img, *files, &spec.package, &base, args.runs, &imgapi).await {
                    Ok(v) => v,
                    Err(e) => json!({ "error": format!("{e:#}") }),
                }
            }
        };
        out[key] = result;
    }
    Ok(out)
}

/// Medians of the three paths.
struct Times {
    agentsadm: f64,
    cn_agent: f64,
    bare: f64,
}

impl Times {
    /// The timing keys of every run's object.
    fn write(&self, out: &mut serde_json::Value) {
        out["agentsadm_s"] = json!(round(self.agentsadm));
        out["cn_agent_path_s"] = json!(round(self.cn_agent));
        out["bare_tar_s"] = json!(round(self.bare));
        out["speedup_vs_cn_agent"] = json!(round(self.cn_agent / self.agentsadm));
        out["ratio_vs_bare_tar"] = json!(round(self.agentsadm / self.bare));
    }
}

/// The realistic image in a fresh directory under `base`.
async fn run_realistic(
    image: &BuiltImage,
    files: u64,
    package: &str,
    base: &Path,
    runs: usize,
    imgapi: &ImgapiStandIn,
) -> anyhow::Result<serde_json::Value> {
    imgapi.publish(image);
    let work = base.join(format!(
        "agentsadm-bench-install-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let times = compare(image, package, &work, runs, imgapi).await;
    let _ = std::fs::remove_dir_all(&work);
    let times = times?;
    let mut out = json!({
        "image_mb": round(image.file.len() as f64 / 1e6),
        "files": files,
        "dir": base.display().to_string(),
    });
    times.write(&mut out);
    Ok(out)
}

/// `/dev/shm` when it is a tmpfs.
fn tmpfs_dir() -> Option<PathBuf> {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let c = std::ffi::CString::new(TMPFS_DIR).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path, `st` a valid out-pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[expect(
        clippy::unnecessary_cast,
        reason = "f_type's type differs between platforms"
    )]
    let kind = st.f_type as i64;
    (kind == TMPFS_MAGIC).then(|| PathBuf::from(TMPFS_DIR))
}

/// Time the three paths on `image` under `work`, interleaved.
async fn compare(
    image: &BuiltImage,
    package: &str,
    work: &Path,
    runs: usize,
    imgapi: &ImgapiStandIn,
) -> anyhow::Result<Times> {
    let uuid = image.manifest.uuid;
    let local = work.join("image.tgz");
    std::fs::write(&local, &image.file)?;
    let expected_sha1 = image.manifest.files[0].sha1.clone();
    let mut agentsadm = Vec::new();
    let mut cn_agent = Vec::new();
    let mut bare = Vec::new();
    for i in 0..runs {
        // Interleaved, so drift in machine load hits all three alike. Trees
        // stay until the end: deleting thousands of files just before the
        // next path runs would charge it for the filesystem's clean-up
        // (ext4 skips recently freed inodes one by one).
        let root = work.join(format!("root-{i}"));
        settle();
        agentsadm.push(time_agentsadm(&root, &imgapi.url(), uuid).await?);

        let dir = work.join(format!("cn-{i}"));
        settle();
        cn_agent.push(time_cn_agent(
            &dir,
            &imgapi.url(),
            uuid,
            &expected_sha1,
            package,
        )?);

        let dir = work.join(format!("bare-{i}"));
        std::fs::create_dir_all(&dir)?;
        settle();
        let t = Instant::now();
        run_ok(
            Command::new("tar")
                .arg("-xzf")
                .arg(&local)
                .arg("-C")
                .arg(&dir),
        )?;
        bare.push(t.elapsed());
    }
    Ok(Times {
        agentsadm: median(&mut agentsadm),
        cn_agent: median(&mut cn_agent),
        bare: median(&mut bare),
    })
}

/// Write back every dirty page before a path is timed, the same for all
/// three: each path leaves 80-130 MB of dirty pages on disk runs, which the
/// kernel writes back about 30 s later, in the middle of whichever path is
/// running then (on this 2-core machine the flusher's block allocation
/// takes a core from it).
fn settle() {
    // SAFETY: sync(2) has no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// One line of a shape file.
struct ShapeEntry {
    kind: char,
    size: usize,
    mode: u32,
    /// Relative to the package directory ("" for the directory itself).
    rel: String,
}

fn read_shape(path: &Path) -> anyhow::Result<Vec<ShapeEntry>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "read the realistic shape {} (pass --shape FILE)",
            path.display()
        )
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || {
            anyhow::anyhow!(
                "{}:{}: not type<TAB>size<TAB>mode<TAB>path",
                path.display(),
                n + 1
            )
        };
        if f.len() != 4 {
            return Err(bad());
        }
        let kind = f[0].chars().next().ok_or_else(bad)?;
        let size = f[1].parse().map_err(|_| bad())?;
        let mode = u32::from_str_radix(f[2], 8).map_err(|_| bad())?;
        let rel = f[3].split_once('/').map_or("", |(_, r)| r).to_string();
        out.push(ShapeEntry {
            kind,
            size,
            mode,
            rel,
        });
    }
    Ok(out)
}

/// The realistic image: the shape's tree under `package`, synthetic
/// contents, a `--node-mb` node at `node/bin/node`, and the base vm-agent
/// image's `package.json`, `image_uuid`, bin, SMF template and the
/// postinstall that renders it (so it installs like any vm-agent). Returns the image and its file count.
fn realistic_image(args: &InstallBenchArgs, package: &str) -> anyhow::Result<(BuiltImage, u64)> {
    use rand::SeedableRng;
    let shape = read_shape(&args.shape)?;
    let catalog = Catalog::builtin();
    let mut spec = ImageSpec::for_component(catalog.require("vm-agent")?, "1.0.0");
    spec.hooks = Hooks::default();
    let base = imagebuild::build(&spec);
    let bin = format!("bin/{package}");
    let template = format!("smf/manifests/{package}.xml.in");
    let wanted = [
        "package.json",
        "image_uuid",
        "npm/postinstall.sh",
        bin.as_str(),
        template.as_str(),
    ];
    let (_, base_files) = agentsadm_gz::unpack::read_members(
        &base.file[..],
        Compression::Gzip,
        Some(package),
        &wanted,
        1 << 20,
    )?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x00c0_ffee);
    let mut b = tar::Builder::new(Vec::new());
    let mut files = 0u64;
    let append = |b: &mut tar::Builder<Vec<u8>>, kind, rel: &str, mode, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_763_769_600);
        let path = if rel.is_empty() {
            format!("{package}/")
        } else {
            format!("{package}/{rel}")
        };
        b.append_data(&mut h, path, data)
    };
    for e in &shape {
        match e.kind {
            'd' => append(&mut b, tar::EntryType::Directory, &e.rel, e.mode, &[])?,
            'l' => {
                // The shape does not keep targets: point at package.json.
                let depth = e.rel.matches('/').count();
                let target = format!("{}package.json", "../".repeat(depth));
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, format!("{package}/{}", e.rel), target)?;
            }
            'f' if e.rel.starts_with("smf/manifests/") => {}
            'f' => {
                files += 1;
                let data = match base_files.get(&e.rel) {
                    Some(d) => d.clone(),
                    None if e.rel == "node/bin/node" => binary(&mut rng, args.node_mb << 20),
                    None => text(&mut rng, e.size),
                };
                append(&mut b, tar::EntryType::Regular, &e.rel, e.mode, &data)?;
            }
            other => bail!("{}: unknown entry type {other:?}", args.shape.display()),
        }
    }
    for (rel, mode) in [(&bin, 0o755), (&template, 0o644)] {
        if let Some(d) = base_files.get(rel.as_str()) {
            files += 1;
            append(&mut b, tar::EntryType::Regular, rel, mode, d)?;
        }
    }
    let tar = b.into_inner()?;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut enc, &tar)?;
    let file = enc.finish()?;
    let mut manifest = base.manifest.clone();
    manifest.files[0].sha1 = format!("{:x}", <sha1::Sha1 as sha1::Digest>::digest(&file));
    manifest.files[0].size = file.len() as u64;
    Ok((BuiltImage { manifest, file }, files))
}

/// JavaScript-like text of `len` bytes: words from a small vocabulary,
/// which gzip shrinks about 4 times, like real code.
fn text(rng: &mut impl rand::Rng, len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "function",
        "var",
        "return",
        "if",
        "else",
        "this",
        "self",
        "callback",
        "err",
        "opts",
        "log",
        "require",
        "module.exports",
        "=",
        "===",
        "!==",
        "{",
        "}",
        "(",
        ")",
        ";",
        ",",
        "assert.object",
        "assert.string",
        "assert.func",
        "null",
        "undefined",
        "true",
        "false",
        "vasync.pipeline",
        "funcs",
        "arg",
        "cb",
        "next",
        "new",
        "Error",
        "util.format",
        "'%s'",
        "data",
        "server",
        "agent",
        "image",
        "uuid",
        "task",
        "params",
        "req",
        "res",
        "sysinfo",
        "0",
        "1",
        "+",
        "-",
        "*",
        "/",
        ":",
        "?",
        "forEach",
        "map",
        "length",
        "push",
        "key",
    ];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let w = WORDS[rng.gen_range(0..WORDS.len())];
        out.extend_from_slice(w.as_bytes());
        if rng.gen_range(0..8) == 0 {
            out.push(b'\n');
            out.extend_from_slice(&b"            "[..rng.gen_range(0..4) * 4]);
        } else {
            out.push(b' ');
        }
        // Identifiers differ from file to file.
        if rng.gen_range(0..6) == 0 {
            out.extend_from_slice(format!("v{} ", rng.gen_range(0..4096)).as_bytes());
        }
    }
    out.truncate(len);
    out
}

/// Machine-code-like bytes of `len`: runs of random bytes between
/// repetitive stretches, which gzip shrinks 2.5 to 3 times, like a node
/// binary.
fn binary(rng: &mut impl rand::Rng, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for block in out.chunks_mut(64) {
        match rng.gen_range(0..20) {
            0..=3 => rng.fill(block),
            4..=15 => {
                let a = rng.r#gen::<u8>() & 0x3f;
                for (i, b) in block.iter_mut().enumerate() {
                    let noise = if i % 4 == 0 {
                        rng.gen_range(0..4) << 6
                    } else {
                        0
                    };
                    *b = a.wrapping_add((i % 8) as u8) | noise;
                }
            }
            _ => {}
        }
    }
    out
}

async fn time_agentsadm(
    root: &Path,
    imgapi: &str,
    uuid: agentsadm_types::ids::ImageUuid,
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
    let mut settings = GzSettings::new(root, PlatformKind::Rooted);
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
    uuid: agentsadm_types::ids::ImageUuid,
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn gzip_ratio(data: &[u8]) -> f64 {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, data).unwrap();
        data.len() as f64 / enc.finish().unwrap().len() as f64
    }

    #[test]
    fn synthetic_contents_compress_like_real_ones() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let t = gzip_ratio(&text(&mut rng, 1 << 20));
        let b = gzip_ratio(&binary(&mut rng, 4 << 20));
        eprintln!("text {t:.2}x, binary {b:.2}x");
        assert!((3.0..5.0).contains(&t), "text {t}");
        assert!((2.0..3.5).contains(&b), "binary {b}");
    }
}
