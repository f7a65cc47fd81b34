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
//! The same three paths are timed on a realistic shape: cn-agent's
//! tree (`--shape`, 9,300 files in 1,060 directories, median 0.9 KB, from a
//! real image) with deterministic synthetic contents (JavaScript-like text
//! that gzip shrinks about as much as real code) and a `--node-mb` binary
//! as the bundled node, once in a directory on disk (`realistic`) and once
//! on tmpfs (`realistic_tmpfs`, `/dev/shm`), where per-file costs are not
//! hidden behind the disk.
//!
//! Each path's figures are the medians of its wall time and of its CPU
//! time (`*_cpu_s`, user + system, and `*_sys_s`, system alone: this
//! process's threads and its waited-for children, so the loopback IMGAPI's
//! serving is charged to every path alike). The CPU figures change much
//! less than the wall times with the load other processes put on the
//! machine; `cpu_speedup_vs_cn_agent` and `cpu_ratio_vs_bare_tar` are the
//! ratios of the CPU medians.
//!
//! Every timed run starts from the same disk state, whichever path ran
//! before it:
//! - Before each timed path, `sync` writes back what earlier paths left
//!   dirty, so no path pays for another's writeback.
//! - Nothing is deleted between timed runs: each path of each run gets a
//!   fresh directory. On ext4 without a journal (the root filesystem of
//!   the machines this is run on), creating a file skips, one lookup each,
//!   every inode of its block group freed in the last 60 s (360 s while
//!   its inode table block is dirty): 10,000 files created right after
//!   10,000 were deleted cost 1.86 s of system time instead of 0.21 s.
//!   Removing the previous run's tree before each run would charge that to
//!   whichever path comes next.
//! - The disk trees are not removed at the end either (that would slow the
//!   next `bench install` the same way): their files are truncated (which
//!   frees the blocks, not the inodes) and the trees moved into
//!   `<dir>/agentsadm-bench-install.trash/` (about 70 MB a run), whose
//!   trees a later run removes once they are [`TRASH_AGE_S`] old. Runs made
//!   one after the other remove nothing.
//! - The disk run goes first, and waits (untimed, after a `sync`) until the
//!   trees a run removed from the same directory are [`FREED_WINDOW_S`] old
//!   (noted in `<dir>/agentsadm-bench-install.freed`);
//!   `waited_for_freed_inodes_s` says how long. Other processes' deletions
//!   in the same block groups are not seen: on a shared machine the disk
//!   figures vary for that reason, and the `*_sys_s` figures show it.
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
    let mut out = json!({ "image_mb": args.image_mb });

    // The realistic shape, on disk first (see the module docs: nothing of
    // this run has freed inodes yet), then the single file, then tmpfs.
    let realistic = realistic_image(args, &spec.package);
    let disk = if Path::new(DISK_DIR).is_dir() {
        PathBuf::from(DISK_DIR)
    } else {
        std::env::temp_dir()
    };
    out["realistic"] =
        realistic_phase(&realistic, Some(disk), true, &spec.package, args, &imgapi).await;

    imgapi.publish(&image);
    let times = compare(&image, &spec.package, work, args.runs, &imgapi).await?;
    times.write(&mut out);

    out["realistic_tmpfs"] =
        realistic_phase(&realistic, tmpfs_dir(), false, &spec.package, args, &imgapi).await;
    Ok(out)
}

/// One realistic run's object, or the error that stopped it.
async fn realistic_phase(
    realistic: &anyhow::Result<(BuiltImage, u64)>,
    base: Option<PathBuf>,
    on_disk: bool,
    package: &str,
    args: &InstallBenchArgs,
    imgapi: &ImgapiStandIn,
) -> serde_json::Value {
    match (realistic, base) {
        (Err(e), _) => json!({ "error": format!("{e:#}") }),
        (Ok(_), None) => json!({
            "error": format!("no tmpfs at {TMPFS_DIR} on this machine; only the disk run was measured")
        }),
        (Ok((img, files)), Some(base)) => {
            let realistic = Realistic {
                image: img,
                files: *files,
                package,
                base: &base,
                on_disk,
            };
            match run_realistic(&realistic, args.runs, imgapi).await {
                Ok(v) => v,
                Err(e) => json!({ "error": format!("{e:#}") }),
            }
        }
    }
}

/// Medians of the three paths.
struct Times {
    agentsadm: Median,
    cn_agent: Median,
    bare: Median,
}

/// One path's medians over its runs: wall time, and CPU time (user +
/// system, and system alone) of this process and its children, which
/// the load of other processes on the machine changes much less than
/// the wall time.
struct Median {
    wall: f64,
    cpu: f64,
    sys: f64,
}

impl Times {
    /// The timing keys of every run's object.
    fn write(&self, out: &mut serde_json::Value) {
        out["agentsadm_s"] = json!(round(self.agentsadm.wall));
        out["cn_agent_path_s"] = json!(round(self.cn_agent.wall));
        out["bare_tar_s"] = json!(round(self.bare.wall));
        out["speedup_vs_cn_agent"] = json!(round(self.cn_agent.wall / self.agentsadm.wall));
        out["ratio_vs_bare_tar"] = json!(round(self.agentsadm.wall / self.bare.wall));
        for (key, m) in [
            ("agentsadm", &self.agentsadm),
            ("cn_agent_path", &self.cn_agent),
            ("bare_tar", &self.bare),
        ] {
            out[format!("{key}_cpu_s")] = json!(round(m.cpu));
            out[format!("{key}_sys_s")] = json!(round(m.sys));
        }
        out["cpu_speedup_vs_cn_agent"] = json!(round(self.cn_agent.cpu / self.agentsadm.cpu));
        out["cpu_ratio_vs_bare_tar"] = json!(round(self.agentsadm.cpu / self.bare.cpu));
    }
}

/// One timed run of a path.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    wall: Duration,
    /// User + system CPU seconds.
    cpu: f64,
    /// System CPU seconds (the kernel's share: file creation, the
    /// filesystem's allocators).
    sys: f64,
}

/// CPU seconds (user, system) used so far by this process (every thread)
/// and by its children that were waited for.
fn cpu_used() -> (f64, f64) {
    let mut user = 0.0;
    let mut sys = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: `ru` is a valid out-pointer for getrusage(2).
        if unsafe { libc::getrusage(who, ru.as_mut_ptr()) } != 0 {
            continue;
        }
        // SAFETY: getrusage returned 0, so it filled `ru`.
        let ru = unsafe { ru.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        user += secs(ru.ru_utime);
        sys += secs(ru.ru_stime);
    }
    (user, sys)
}

/// Time `f`, in wall and CPU time. The CPU time is the whole process's
/// and its children's (the benchmark runs nothing else meanwhile; the
/// loopback IMGAPI's serving is charged to every path alike).
async fn timed<F, T>(f: F) -> anyhow::Result<(Sample, T)>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let (u0, s0) = cpu_used();
    let t = Instant::now();
    let out = f.await?;
    let wall = t.elapsed();
    let (u1, s1) = cpu_used();
    let sample = Sample {
        wall,
        cpu: (u1 - u0) + (s1 - s0),
        sys: s1 - s0,
    };
    Ok((sample, out))
}

/// One realistic run: the image and where it is installed.
struct Realistic<'a> {
    image: &'a BuiltImage,
    files: u64,
    package: &'a str,
    base: &'a Path,
    /// On a disk filesystem, whose freed inodes the next run must wait
    /// out ([`wait_out_freed_inodes`]).
    on_disk: bool,
}

/// The realistic image in a fresh directory under `base`.
async fn run_realistic(
    r: &Realistic<'_>,
    runs: usize,
    imgapi: &ImgapiStandIn,
) -> anyhow::Result<serde_json::Value> {
    imgapi.publish(r.image);
    let waited = if r.on_disk && r.files >= FREED_MIN_FILES {
        wait_out_freed_inodes(r.base).await
    } else {
        0.0
    };
    let work = r.base.join(format!(
        "agentsadm-bench-install-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let times = compare(r.image, r.package, &work, runs, imgapi).await;
    if r.on_disk && r.files >= FREED_MIN_FILES {
        // Every path of every run made a tree of `files` files.
        put_aside(r.base, &work, r.files * 3 * runs as u64);
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let times = times?;
    let mut out = json!({
        "image_mb": round(r.image.file.len() as f64 / 1e6),
        "files": r.files,
        "dir": r.base.display().to_string(),
        "waited_for_freed_inodes_s": round(waited),
    });
    times.write(&mut out);
    Ok(out)
}

/// Where disk runs' trees wait, in the disk directory, until they are
/// [`TRASH_AGE_S`] old and a later run removes them.
const TRASH_DIR: &str = "agentsadm-bench-install.trash";

/// Age (seconds) at which a put-aside tree is removed: runs made one after
/// the other within it remove nothing, so none of them waits.
const TRASH_AGE_S: u64 = 600;

/// Where a run notes when it last removed put-aside trees, and how many
/// files they held (`<unix seconds> <files>`), in the disk directory.
const FREED_MARK: &str = "agentsadm-bench-install.freed";

/// How long after a removal the next disk run waits: ext4 without a
/// journal skips every inode freed in the last 60 s while it looks for a
/// free one, and in the last 360 s while the freed inode's table block is
/// not written back. A run's own file creations dirty table blocks next
/// to the freed inodes again after the `sync`, and a 65 s wait was not
/// seen to be enough, so the longer window is waited out.
const FREED_WINDOW_S: u64 = 360;

/// Runs with fewer files than this neither wait nor put trees aside:
/// their trees are too small to slow anything (the tests' shapes).
const FREED_MIN_FILES: u64 = 1_000;

/// Wait, untimed, until the trees an earlier run removed from `base` are
/// [`FREED_WINDOW_S`] old, and write everything back first. Returns the
/// seconds waited.
async fn wait_out_freed_inodes(base: &Path) -> f64 {
    settle();
    let Ok(text) = std::fs::read_to_string(base.join(FREED_MARK)) else {
        return 0.0;
    };
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let (Some(Ok(at)), Some(Ok(files))) = (fields.next(), fields.next()) else {
        return 0.0;
    };
    let now = unix_now();
    if files < FREED_MIN_FILES || now >= at + FREED_WINDOW_S {
        return 0.0;
    }
    // A clock set back must not make it wait longer than the window.
    let wait = (at + FREED_WINDOW_S - now).min(FREED_WINDOW_S);
    eprintln!(
        "bench install: waiting {wait} s, untimed: {files} files were removed from {} at {at}, and the filesystem skips recently freed inodes",
        base.display()
    );
    tokio::time::sleep(Duration::from_secs(wait)).await;
    settle();
    wait as f64
}

/// Move a disk run's `work` directory (`files` files in its trees) into
/// [`TRASH_DIR`] instead of removing it, after emptying its files, then
/// remove the put-aside trees that are [`TRASH_AGE_S`] old (and note it
/// for the next run). Falls back to removing `work`.
fn put_aside(base: &Path, work: &Path, files: u64) {
    let trash = base.join(TRASH_DIR);
    empty_files(work);
    let dest = trash.join(format!(
        "{}-{files}-{}-{:08x}",
        unix_now(),
        std::process::id(),
        rand::random::<u32>()
    ));
    let moved = std::fs::create_dir_all(&trash).and_then(|()| std::fs::rename(work, &dest));
    if moved.is_err() {
        let _ = std::fs::remove_dir_all(work);
        record_freed(base, files);
    }
    let Ok(entries) = std::fs::read_dir(&trash) else {
        return;
    };
    let now = unix_now();
    let mut freed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let mut f = name.split('-').map(str::parse::<u64>);
        let (Some(Ok(at)), Some(Ok(n))) = (f.next(), f.next()) else {
            continue;
        };
        if now >= at + TRASH_AGE_S && std::fs::remove_dir_all(e.path()).is_ok() {
            freed += n;
        }
    }
    if freed > 0 {
        record_freed(base, freed);
    }
}

/// Truncate every regular file under `dir` (not following links): their
/// blocks are freed at once (a run's trees hold about 1 GB), while their
/// inodes, which are what slows the next run when freed, stay in use.
fn empty_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            empty_files(&e.path());
        } else if kind.is_file()
            && let Ok(f) = std::fs::OpenOptions::new().write(true).open(e.path())
        {
            let _ = f.set_len(0);
        }
    }
}

/// Note that `files` files were just removed from `base`.
fn record_freed(base: &Path, files: u64) {
    let _ = std::fs::write(base.join(FREED_MARK), format!("{} {files}\n", unix_now()));
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
        cn_agent.push(time_cn_agent(&dir, &imgapi.url(), uuid, &expected_sha1, package).await?);

        let dir = work.join(format!("bare-{i}"));
        std::fs::create_dir_all(&dir)?;
        settle();
        let tar = async {
            run_ok(
                Command::new("tar")
                    .arg("-xzf")
                    .arg(&local)
                    .arg("-C")
                    .arg(&dir),
            )
        };
        bare.push(timed(tar).await?.0);
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
) -> anyhow::Result<Sample> {
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
    let install = async {
        let mut session = GzSession::open(settings, true).await?;
        Ok(session.install(&[ImageSource::Imgapi(uuid)]).await)
    };
    let (sample, result) = timed(install).await?;
    if let Some(e) = result.error {
        bail!("agentsadm install failed at {}: {}", e.step, e.message);
    }
    Ok(sample)
}

/// cn-agent's `getAgentImage` + apm install, as the commands it runs.
async fn time_cn_agent(
    dir: &Path,
    imgapi: &str,
    uuid: agentsadm_types::ids::ImageUuid,
    sha1: &str,
    package: &str,
) -> anyhow::Result<Sample> {
    let installdir = dir.join("node_modules");
    std::fs::create_dir_all(&installdir)?;
    let file = dir.join(format!("{uuid}.file"));
    let tgz: PathBuf = dir.join(format!("{uuid}.tar.gz"));
    let unpack = dir.join("apm-tmp/package");
    let path = async {
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
        Ok(())
    };
    Ok(timed(path).await?.0)
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

/// The median of each figure over `v`'s runs (taken separately).
fn median(v: &mut [Sample]) -> Median {
    let mid = v.len() / 2;
    v.sort_by_key(|s| s.wall);
    let wall = v[mid].wall.as_secs_f64();
    v.sort_by(|a, b| a.cpu.total_cmp(&b.cpu));
    let cpu = v[mid].cpu;
    v.sort_by(|a, b| a.sys.total_cmp(&b.sys));
    Median {
        wall,
        cpu,
        sys: v[mid].sys,
    }
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
    fn a_disk_run_puts_its_trees_aside_and_removes_only_old_ones() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path();
        let old = base.join(TRASH_DIR).join("0-5000-1-00000000");
        std::fs::create_dir_all(old.join("d")).unwrap();
        let work = base.join("work");
        std::fs::create_dir_all(work.join("t/node/bin")).unwrap();
        std::fs::write(work.join("t/a.js"), b"x").unwrap();
        std::fs::write(work.join("t/node/bin/node"), vec![7u8; 1 << 16]).unwrap();

        put_aside(base, &work, 3_000);

        assert!(!work.exists() && !old.exists());
        let kept: Vec<_> = std::fs::read_dir(base.join(TRASH_DIR))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let name = kept[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.split('-').nth(1) == Some("3000"), "{name}");
        for f in ["t/a.js", "t/node/bin/node"] {
            assert_eq!(std::fs::metadata(kept[0].join(f)).unwrap().len(), 0, "{f}");
        }
        let mark = std::fs::read_to_string(base.join(FREED_MARK)).unwrap();
        assert_eq!(mark.split_whitespace().nth(1), Some("5000"), "{mark}");
    }

    #[test]
    fn each_figure_is_its_own_median() {
        let s = |w: u64, cpu: f64, sys: f64| Sample {
            wall: Duration::from_millis(w),
            cpu,
            sys,
        };
        let mut v = [s(300, 0.1, 0.9), s(100, 0.3, 0.2), s(200, 0.2, 0.5)];
        let m = median(&mut v);
        assert_eq!((m.wall, m.cpu, m.sys), (0.2, 0.2, 0.5));
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
