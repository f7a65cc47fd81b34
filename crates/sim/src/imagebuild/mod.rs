//! Builds format-correct component images (tarball plus IMGAPI manifest) for
//! tests, the simulator, the demo and benchmarks.
//!
//! The layouts follow the real builds (docs/triton/agent-install.md §1, §5):
//! one top-level directory named after the package, `image_uuid` inside it
//! equal to the manifest UUID, `package.json` with a `<semver>-<stamp>`
//! version and apm lifecycle scripts under `npm/`. Where our images differ
//! from the real ones (dockerlogger and sdcadm are tarballs rather than shell
//! archives; gz-tools also carries `gz-tools/image_uuid`) it is noted below.

pub mod hostile;
pub mod shar;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rand::{RngCore, SeedableRng};
use serde_json::json;
use sha1::{Digest, Sha1};

use agentsadm_types::catalog::Component;

use agentsadm_types::catalog::ComponentKind;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::image::ADMIN_OWNER;
use agentsadm_types::image::Compression;
use agentsadm_types::image::ImageFile;
use agentsadm_types::image::ImageManifest;
use agentsadm_types::image::ImageState;

/// Lifecycle scripts (bash bodies, without the `#!` line). `None` leaves the
/// hook out of `package.json`, except an apm postinstall that renders the
/// package's SMF templates ([`ImageSpec::postinstall_renders_smf`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    pub preinstall: Option<String>,
    pub postinstall: Option<String>,
    pub preuninstall: Option<String>,
    pub postuninstall: Option<String>,
}

impl Hooks {
    fn entries(&self) -> Vec<(&'static str, &String)> {
        let mut out = Vec::new();
        for (name, body) in [
            ("preinstall", &self.preinstall),
            ("postinstall", &self.postinstall),
            ("preuninstall", &self.preuninstall),
            ("postuninstall", &self.postuninstall),
        ] {
            if let Some(b) = body {
                out.push((name, b));
            }
        }
        out
    }
}

/// How an image file is packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// A (compressed) tar stream with one top-level directory.
    Tarball,
    /// A GNU sharutils shell archive wrapped the way Triton's `mk-shar`
    /// scripts wrap it (docs/triton/agent-install.md §§5.3-5.4): no
    /// `image_uuid` inside; for sdcadm the tree is in `contents.tgz`.
    Shar,
}

/// What to build.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSpec {
    /// Component (and image) name.
    pub name: String,
    /// The package / top-level directory name (differs for marlin-agent).
    pub package: String,
    pub kind: ComponentKind,
    /// Full version, `<semver>-<branch>-<stamp>-g<sha>`.
    pub version: String,
    pub uuid: ImageUuid,
    /// Size of the incompressible filler file.
    pub payload_bytes: usize,
    pub hooks: Hooks,
    pub compression: Compression,
    /// How the file is packed: a tarball, or a shell archive as Triton
    /// builds dockerlogger and sdcadm (`compression` is then ignored: a shar
    /// is stored uncompressed).
    pub format: ImageFormat,
    pub description: String,
    pub published_at: Option<String>,
    /// SMF FMRI the package delivers (`svc:/smartdc/agent/<name>:default`).
    pub smf_fmri: Option<String>,
    /// apm: whether the postinstall renders the package's SMF templates
    /// into apm's SMF directory before running `hooks.postinstall`, as
    /// every real agent's postinstall does (true by default; false builds
    /// a package whose postinstall does not, like config-agent's when it
    /// skips itself).
    pub postinstall_renders_smf: bool,
}

impl ImageSpec {
    /// Defaults for a catalog component at a semver: a v4 UUID, a version in
    /// the real build form, a 4 KiB payload, the default hooks, and the
    /// packing real builds use (gzip'd tarballs; shars for dockerlogger and
    /// sdcadm).
    pub fn for_component(c: &Component, semver: &str) -> ImageSpec {
        let uuid = ImageUuid::new_v4();
        let sha = &uuid.to_string()[..7];
        let package = c.package_name().to_string();
        ImageSpec {
            name: c.name.to_string(),
            package: package.clone(),
            kind: c.kind,
            version: agentsadm_types::image::agent_version_string(semver, "master", STAMP, sha),
            uuid,
            payload_bytes: 4096,
            hooks: match c.kind {
                ComponentKind::ApmAgent => default_hooks(&package),
                _ => Hooks::default(),
            },
            compression: match c.kind {
                ComponentKind::Dockerlogger | ComponentKind::Sdcadm => Compression::None,
                _ => Compression::Gzip,
            },
            format: match c.kind {
                ComponentKind::Dockerlogger | ComponentKind::Sdcadm => ImageFormat::Shar,
                _ => ImageFormat::Tarball,
            },
            description: c.description.clone(),
            published_at: None,
            smf_fmri: c.smf_services.first().cloned(),
            postinstall_renders_smf: true,
        }
    }

    /// The `-<branch>-<stamp>-g<sha>` part of the version, IMGAPI's
    /// `tags.buildstamp`.
    pub fn buildstamp(&self) -> String {
        match self.version.split_once('-') {
            Some((_, rest)) => rest.to_string(),
            None => self.version.clone(),
        }
    }
}

/// The build timestamp our synthetic images carry.
const STAMP: &str = "20261122T000000Z";

/// apm-compatible hooks that only touch paths under the prefix apm passes in,
/// so they are safe in a rooted directory. The installer, not the hooks, owns
/// the instance UUID file `$npm_config_etc/<package>`.
pub fn default_hooks(package: &str) -> Hooks {
    Hooks {
        // apm runs preinstall with cwd = the unpacked package.
        preinstall: Some("test -f ./package.json".to_string()),
        postinstall: Some(format!(
            "set -o errexit\nmkdir -p \"$npm_config_etc\"\necho \"$npm_package_version\" > \"$npm_config_etc/{package}.installed\""
        )),
        preuninstall: Some("true".to_string()),
        postuninstall: Some(format!("rm -f \"$npm_config_etc/{package}.installed\"")),
    }
}

/// What every synthetic apm postinstall starts with: render each
/// `smf/manifests/<name>.xml.in` of the package into
/// `$npm_config_smfdir/<name>.xml`, substituting the tokens the real
/// agents' postinstalls substitute (their `subfile`: `@@PREFIX@@` from
/// `npm_config_prefix`, `@@VERSION@@` from `npm_package_version`,
/// `@@ROOT@@` the package directory, `@@ENABLED@@`). The installer renders
/// nothing itself.
pub const RENDER_SMF: &str = r#"agent_root="$(cd "$(dirname "$0")/.." && pwd)" || exit 1
for agent_template in "$agent_root"/smf/manifests/*.xml.in; do
    [[ -f "$agent_template" ]] || continue
    agent_manifest="$npm_config_smfdir/$(basename "$agent_template" .in)"
    if ! sed -e "s#@@PREFIX@@#$npm_config_prefix#g"         -e "s/@@VERSION@@/$npm_package_version/g"         -e "s#@@ROOT@@#$agent_root#g"         -e "s/@@ENABLED@@/true/g"         "$agent_template" > "$agent_manifest"; then
        echo "could not render $agent_template into $agent_manifest" >&2
        exit 1
    fi
done"#;

/// The hooks an apm image carries: the spec's, the postinstall preceded by
/// [`RENDER_SMF`] when the package ships a manifest template and
/// `postinstall_renders_smf` is set (a postinstall is then always there).
fn apm_hooks(spec: &ImageSpec) -> Hooks {
    let mut hooks = spec.hooks.clone();
    if spec.smf_fmri.is_some() && spec.postinstall_renders_smf {
        hooks.postinstall = Some(match hooks.postinstall.take() {
            Some(body) => format!(
                "{RENDER_SMF}
{body}"
            ),
            None => RENDER_SMF.to_string(),
        });
    }
    hooks
}

/// A built image: its manifest (files[0] filled in) and the file bytes.
#[derive(Clone, Debug)]
pub struct BuiltImage {
    pub manifest: ImageManifest,
    pub file: Vec<u8>,
}

/// Build the image described by `spec`.
pub fn build(spec: &ImageSpec) -> BuiltImage {
    let (file, compression) = match (spec.format, spec.kind) {
        (ImageFormat::Shar, ComponentKind::Dockerlogger) => {
            (dockerlogger_shar(spec).into_bytes(), Compression::None)
        }
        (ImageFormat::Shar, ComponentKind::Sdcadm) => {
            (sdcadm_shar(spec).into_bytes(), Compression::None)
        }
        _ => {
            let tar_bytes = match spec.kind {
                ComponentKind::ApmAgent => apm_tree(spec),
                ComponentKind::GzTools => gz_tools_tree(spec),
                ComponentKind::Dockerlogger => dockerlogger_tree(spec),
                ComponentKind::Sdcadm => sdcadm_tree(spec),
                ComponentKind::Agentsadm => agentsadm_tree(spec),
            };
            (compress(&tar_bytes, spec.compression), spec.compression)
        }
    };
    let sha1 = format!("{:x}", Sha1::digest(&file));
    let mut tags = BTreeMap::new();
    tags.insert("smartdc_service".to_string(), json!("true"));
    tags.insert("buildstamp".to_string(), json!(spec.buildstamp()));
    let manifest = ImageManifest {
        v: 2,
        uuid: spec.uuid,
        owner: ADMIN_OWNER.to_string(),
        name: spec.name.clone(),
        version: spec.version.clone(),
        state: ImageState::Active,
        disabled: false,
        public: false,
        published_at: spec.published_at.clone(),
        image_type: "other".to_string(),
        os: "other".to_string(),
        files: vec![ImageFile {
            sha1,
            size: file.len() as u64,
            compression,
            stor: None,
        }],
        description: Some(spec.description.clone()),
        tags: Some(tags),
        channels: None,
        extra: BTreeMap::new(),
    };
    BuiltImage { manifest, file }
}

/// Write `<uuid>.manifest` and `<uuid>.file` into `dir` (the USB-key layout
/// of one component directory).
pub fn write_to_dir(img: &BuiltImage, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let m = dir.join(format!("{}.manifest", img.manifest.uuid));
    let f = dir.join(format!("{}.file", img.manifest.uuid));
    let text = serde_json::to_string_pretty(&img.manifest).map_err(std::io::Error::other)?;
    std::fs::write(&m, text + "\n")?;
    std::fs::write(&f, &img.file)?;
    Ok((m, f))
}

fn compress(tar: &[u8], compression: Compression) -> Vec<u8> {
    match compression {
        Compression::Gzip => {
            // Level 1: the payload is incompressible by design and the bench
            // builds 50 MB images; a higher level only costs time.
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(tar).expect("write to Vec");
            enc.finish().expect("finish gzip")
        }
        Compression::Bzip2 => {
            let mut enc = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            enc.write_all(tar).expect("write to Vec");
            enc.finish().expect("finish bzip2")
        }
        // xz is a valid IMGAPI compression but no component uses it; store
        // the tar as-is so a test can see the installer reject the mismatch.
        Compression::Xz | Compression::None => tar.to_vec(),
    }
}

/// Incompressible bytes, reproducible from the image UUID.
fn payload(spec: &ImageSpec, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(spec.uuid.as_uuid().as_u64_pair().0);
    let mut buf = vec![0u8; len];
    rng.fill_bytes(&mut buf);
    buf
}

/// A small tar writer with fixed owners and mtimes, so builds are
/// reproducible.
pub struct TreeBuilder {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for TreeBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TreeBuilder {
    pub fn new() -> TreeBuilder {
        let mut builder = tar::Builder::new(Vec::new());
        builder.mode(tar::HeaderMode::Deterministic);
        TreeBuilder { builder }
    }

    fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_763_769_600);
        h.set_size(size);
        h
    }

    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.dir_mode(path, 0o755)
    }

    /// A directory with `mode` (hostile packages: world-writable, sticky).
    pub fn dir_mode(&mut self, path: &str, mode: u32) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Directory, mode, 0);
        self.builder
            .append_data(
                &mut h,
                format!("{}/", path.trim_end_matches('/')),
                std::io::empty(),
            )
            .expect("append dir");
        self
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Regular, mode, data.len() as u64);
        self.builder
            .append_data(&mut h, path, data)
            .expect("append file");
        self
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0);
        self.builder
            .append_link(&mut h, path, target)
            .expect("append symlink");
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.builder.into_inner().expect("finish tar")
    }
}

fn package_json(spec: &ImageSpec, with_bin: bool) -> Vec<u8> {
    let mut scripts = serde_json::Map::new();
    for (name, _) in spec.hooks.entries() {
        scripts.insert(name.to_string(), json!(format!("npm/{name}.sh")));
    }
    let mut pj = serde_json::Map::new();
    pj.insert("name".into(), json!(spec.package));
    pj.insert("version".into(), json!(spec.version));
    pj.insert("description".into(), json!(spec.description));
    if !scripts.is_empty() {
        pj.insert("scripts".into(), serde_json::Value::Object(scripts));
    }
    if with_bin {
        pj.insert(
            "bin".into(),
            json!({ spec.package.clone(): format!("./bin/{}", spec.package) }),
        );
    }
    let mut text = serde_json::to_vec_pretty(&serde_json::Value::Object(pj)).expect("json");
    text.push(b'\n');
    text
}

fn smf_template(spec: &ImageSpec) -> String {
    let fmri = spec
        .smf_fmri
        .clone()
        .unwrap_or_else(|| format!("svc:/smartdc/agent/{}:default", spec.package));
    let service = fmri
        .trim_start_matches("svc:/")
        .trim_end_matches(":default")
        .to_string();
    format!(
        r#"<?xml version="1.0"?>
<!DOCTYPE service_bundle SYSTEM "/usr/share/lib/xml/dtd/service_bundle.dtd.1">
<service_bundle type="manifest" name="{pkg}">
    <service name="{service}" type="service" version="@@VERSION@@">
        <create_default_instance enabled="@@ENABLED@@"/>
        <single_instance/>
        <dependency name="network" grouping="require_all" restart_on="error" type="service">
            <service_fmri value="svc:/milestone/network:default"/>
        </dependency>
        <exec_method type="method" name="start"
            exec="/usr/bin/ctrun -l child -o noorphan @@ROOT@@/bin/{pkg} &amp;" timeout_seconds="10">
            <method_context>
                <method_environment>
                    <envvar name="PATH" value="@@PREFIX@@/bin:/usr/bin:/usr/sbin"/>
                </method_environment>
            </method_context>
        </exec_method>
        <exec_method type="method" name="stop" exec=":kill" timeout_seconds="30"/>
        <property_group name="startd" type="framework">
            <propval name="ignore_error" type="astring" value="core,signal"/>
        </property_group>
    </service>
</service_bundle>
"#,
        pkg = spec.package,
        service = service,
    )
}

/// A manifest as non-apm packages ship it: no tokens left (nothing
/// substitutes them at install time; dockerlogger and sdcadm copy the file
/// into `/var/svc/manifest/site` as is).
fn concrete_manifest(spec: &ImageSpec, root: &str) -> String {
    smf_template(spec)
        .replace("@@ENABLED@@", "true")
        .replace("@@VERSION@@", &spec.version)
        .replace("@@ROOT@@", root)
        .replace("@@PREFIX@@", "/opt/smartdc")
}

fn apm_tree(spec: &ImageSpec) -> Vec<u8> {
    let with_hooks = ImageSpec {
        hooks: apm_hooks(spec),
        ..spec.clone()
    };
    let spec = &with_hooks;
    let p = &spec.package;
    let mut t = TreeBuilder::new();
    t.dir(p)
        .file(
            &format!("{p}/package.json"),
            0o644,
            &package_json(spec, true),
        )
        .file(
            &format!("{p}/image_uuid"),
            0o644,
            format!("{}\n", spec.uuid).as_bytes(),
        )
        .dir(&format!("{p}/bin"))
        .file(
            &format!("{p}/bin/{p}"),
            0o755,
            format!("#!/bin/bash\necho \"{p} {}\"\n", spec.version).as_bytes(),
        )
        .dir(&format!("{p}/lib"))
        .file(
            &format!("{p}/lib/payload.bin"),
            0o644,
            &payload(spec, spec.payload_bytes),
        )
        .symlink(&format!("{p}/node"), "lib");
    // A component the catalog lists no service for ships no manifest (the
    // real agents_core has none; the installer refuses services outside a
    // component's catalog namespace).
    if spec.smf_fmri.is_some() {
        t.dir(&format!("{p}/smf"))
            .dir(&format!("{p}/smf/manifests"))
            .file(
                &format!("{p}/smf/manifests/{p}.xml.in"),
                0o644,
                smf_template(spec).as_bytes(),
            );
    }
    let hooks = spec.hooks.entries();
    if !hooks.is_empty() {
        t.dir(&format!("{p}/npm"));
        for (name, body) in hooks {
            t.file(
                &format!("{p}/npm/{name}.sh"),
                0o755,
                format!("#!/bin/bash\n{body}\n").as_bytes(),
            );
        }
    }
    t.finish()
}

fn inner_tools(spec: &ImageSpec, full: bool) -> Vec<u8> {
    let mut t = TreeBuilder::new();
    t.dir("bin")
        .file("bin/sdc-usbkey", 0o755, b"#!/bin/bash\necho sdc-usbkey\n")
        .file(
            "bin/sdc-sbcreate",
            0o755,
            b"#!/bin/bash\necho sdc-sbcreate\n",
        )
        .dir("lib")
        .file("lib/common.js", 0o644, b"module.exports = {};\n")
        .file("lib/usbkey.js", 0o644, b"module.exports = {};\n")
        .file("lib/payload.bin", 0o644, &payload(spec, spec.payload_bytes))
        .dir("man")
        .dir("man/man1")
        .file("man/man1/sdc-sbcreate.1", 0o644, b".TH sdc-sbcreate 1\n")
        .dir("etc")
        .file(
            "etc/gz-tools.image",
            0o644,
            format!("{}\n", spec.uuid).as_bytes(),
        );
    if full {
        t.file("bin/sdc-server", 0o755, b"#!/bin/bash\necho sdc-server\n")
            .file("bin/sdc-sapi", 0o755, b"#!/bin/bash\necho sdc-sapi\n")
            .file("man/man1/sdc-server.1", 0o644, b".TH sdc-server 1\n");
    }
    compress(&t.finish(), Compression::Gzip)
}

fn gz_tools_tree(spec: &ImageSpec) -> Vec<u8> {
    let p = &spec.package;
    let mut t = TreeBuilder::new();
    t.dir(p)
        // Not in real gz-tools images (their UUID lives in etc/gz-tools.image
        // inside the inner tarballs); harmless and convenient here.
        .file(
            &format!("{p}/image_uuid"),
            0o644,
            format!("{}\n", spec.uuid).as_bytes(),
        )
        .file(
            &format!("{p}/tools.tar.gz"),
            0o644,
            &inner_tools(spec, true),
        )
        .file(
            &format!("{p}/cn_tools.tar.gz"),
            0o644,
            &inner_tools(spec, false),
        )
        .dir(&format!("{p}/default"))
        .file(
            &format!("{p}/default/README"),
            0o644,
            b"default USB key files\n",
        )
        .dir(&format!("{p}/scripts"))
        .file(
            &format!("{p}/scripts/agentsetup.sh"),
            0o755,
            b"#!/bin/bash\necho agentsetup\n",
        );
    t.finish()
}

fn dockerlogger_tree(spec: &ImageSpec) -> Vec<u8> {
    let mut files: Vec<(String, u32, Vec<u8>)> = vec![
        (
            "image_uuid".into(),
            0o644,
            format!("{}\n", spec.uuid).into_bytes(),
        ),
        ("package.json".into(), 0o644, package_json(spec, false)),
    ];
    files.extend(
        dockerlogger_files(spec)
            .into_iter()
            .map(|(name, mode, data)| (name.to_string(), mode, data)),
    );
    files_tree(Some(&spec.package), &files)
}

/// A tar of `files` (paths relative to `top`, or to the archive root),
/// each parent directory entered once before its first file.
fn files_tree(top: Option<&str>, files: &[(String, u32, Vec<u8>)]) -> Vec<u8> {
    let mut t = TreeBuilder::new();
    let mut made = std::collections::BTreeSet::new();
    let full = |rel: &str| match top {
        Some(top) if rel.is_empty() => top.to_string(),
        Some(top) => format!("{top}/{rel}"),
        None => rel.to_string(),
    };
    if top.is_some() {
        t.dir(&full(""));
    }
    for (path, mode, data) in files {
        for at in shar::parent_dirs(path) {
            if made.insert(at.clone()) {
                t.dir(&full(&at));
            }
        }
        t.file(&full(path), *mode, data);
    }
    t.finish()
}

/// dockerlogger's files: (name in the package, mode, content).
fn dockerlogger_files(spec: &ImageSpec) -> Vec<(&'static str, u32, Vec<u8>)> {
    vec![
        ("dockerlogger", 0o755, payload(spec, spec.payload_bytes)),
        (
            "dockerlogger-setup.sh",
            0o755,
            b"#!/bin/bash\nmkdir -p /lib/sdc/docker\n".to_vec(),
        ),
        (
            "dockerlogger.xml",
            0o644,
            concrete_manifest(spec, "/opt/smartdc/docker").into_bytes(),
        ),
    ]
}

/// The dockerlogger image as Triton builds it: a shar of `dockerlogger/`
/// between a header that moves to /var/tmp and a trailer that runs its
/// `install.sh` (which agentsadm never runs: it reads the files).
fn dockerlogger_shar(spec: &ImageSpec) -> String {
    let p = &spec.package;
    let install = b"#!/bin/bash\n# copies the files into /opt/smartdc/docker and imports the manifest\nexit 0\n";
    let files = dockerlogger_files(spec);
    let mut members: Vec<(String, u32, &[u8])> =
        vec![(format!("{p}/install.sh"), 0o755, install.as_slice())];
    members.extend(
        files
            .iter()
            .map(|(name, mode, data)| (format!("{p}/{name}"), *mode, data.as_slice())),
    );
    let members: Vec<(&str, u32, &[u8])> = members
        .iter()
        .map(|(path, mode, data)| (path.as_str(), *mode, *data))
        .collect();
    format!(
        "#!/bin/sh\nif [ `pwd` != '/var/tmp' ]; then\n  cd /var/tmp\nfi\n\n# Clean up possible previous runs\nrm -fr {p}\n{}\nset -o errexit\nset -o pipefail\n\nif [[ -f {p}/install.sh ]]; then\n    (cd {p} && /bin/bash ./install.sh)\nfi\n\nrm -fr {p}\n\nexit 0\n",
        shar::write(&members)
    )
}

/// The sdcadm image as Triton builds it: a shar of `contents.tgz` (the tree,
/// no top-level directory) and `install-sdcadm.sh`, after a header that
/// checks for the headnode and writes an md5sum helper (a here-document).
fn sdcadm_shar(spec: &ImageSpec) -> String {
    let contents = compress(&files_tree(None, &sdcadm_files(spec)), Compression::Gzip);
    let install =
        b"#!/bin/bash\n# swaps /opt/smartdc/sdcadm for the unpacked contents.tgz\nexit 0\n";
    let members: [(&str, u32, &[u8]); 2] = [
        ("contents.tgz", 0o644, &contents),
        ("install-sdcadm.sh", 0o755, install),
    ];
    format!(
        "#!/bin/bash\n#\n# This shar will install/upgrade \"sdcadm\" on a headnode GZ.\n#\n[[ \"$(zonename)\" == \"global\" ]] || exit 3\nmkdir -p /var/tmp/sdcadm/.temp_bin\ncat > /var/tmp/sdcadm/.temp_bin/md5sum << 'EOFTOOL'\n#!/bin/bash\nexec openssl dgst -md5 \"$@\"\nEOFTOOL\n{}\nset -o errexit\necho \"Installing sdcadm {}.\"\nbash ./install-sdcadm.sh\nexit 0\n",
        shar::write(&members),
        spec.version
    )
}

/// sdcadm's tree, paths relative to /opt/smartdc/sdcadm.
fn sdcadm_files(spec: &ImageSpec) -> Vec<(String, u32, Vec<u8>)> {
    let semver = spec.version.split('-').next().unwrap_or(&spec.version);
    let mut pj = spec.clone();
    // sdcadm's package.json carries the bare semver; the stamp is in
    // etc/buildstamp (agent-install.md §5.4).
    pj.version = semver.to_string();
    pj.hooks = Hooks::default();
    vec![
        ("package.json".into(), 0o644, package_json(&pj, false)),
        (
            "etc/buildstamp".into(),
            0o644,
            format!("{}\n", spec.version).into_bytes(),
        ),
        (
            "bin/sdcadm".into(),
            0o755,
            b"#!/bin/bash\necho sdcadm\n".to_vec(),
        ),
        (
            "lib/payload.bin".into(),
            0o644,
            payload(spec, spec.payload_bytes),
        ),
        (
            "man/man1/sdcadm.1".into(),
            0o644,
            b".TH sdcadm 1\n".to_vec(),
        ),
        (
            "smf/manifests/sdcadm-setup.xml".into(),
            0o644,
            concrete_manifest(spec, "/opt/smartdc/sdcadm").into_bytes(),
        ),
    ]
}

fn sdcadm_tree(spec: &ImageSpec) -> Vec<u8> {
    let mut files = sdcadm_files(spec);
    files.insert(
        1,
        (
            "image_uuid".into(),
            0o644,
            format!("{}\n", spec.uuid).into_bytes(),
        ),
    );
    files_tree(Some(&spec.package), &files)
}

/// agentsadm's image, laid out by the same list `make release` packs
/// ([`agentsadm_gz::release::tree_files`]); its binary a script that says
/// its version (a test runs it to see which copy is installed), the
/// payload after its `exit`.
fn agentsadm_tree(spec: &ImageSpec) -> Vec<u8> {
    let mut binary =
        format!("#!/bin/sh\necho \"agentsadm {}\"\nexit 0\n", spec.version).into_bytes();
    binary.extend(payload(spec, spec.payload_bytes));
    files_tree(
        None,
        &agentsadm_gz::release::tree_files(binary, &spec.version, spec.uuid),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsadm_types::catalog::Catalog;
    use std::io::Read;

    fn entries(img: &BuiltImage) -> Vec<(String, tar::EntryType)> {
        let shar;
        let reader: Box<dyn Read> = match img.manifest.files[0].compression {
            Compression::Gzip => Box::new(flate2::read::GzDecoder::new(&img.file[..])),
            Compression::Bzip2 => Box::new(bzip2::read::BzDecoder::new(&img.file[..])),
            _ if agentsadm_gz::shar::is_shar(&img.file) => {
                shar = agentsadm_gz::shar::to_tar(&img.file, Some(&img.manifest.name)).unwrap();
                Box::new(&shar[..])
            }
            _ => Box::new(&img.file[..]),
        };
        let mut ar = tar::Archive::new(reader);
        ar.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    e.header().entry_type(),
                )
            })
            .collect()
    }

    #[test]
    fn every_catalog_kind_builds_with_one_top_dir() {
        let cat = Catalog::builtin();
        for c in cat.iter() {
            let spec = ImageSpec::for_component(c, "1.2.3");
            let img = build(&spec);
            assert_eq!(img.manifest.name, c.name);
            assert_eq!(img.manifest.files[0].size, img.file.len() as u64);
            assert_eq!(
                img.manifest.files[0].sha1,
                format!("{:x}", Sha1::digest(&img.file))
            );
            let names = entries(&img);
            let top = format!("{}/", c.package_name());
            assert!(
                names.iter().all(|(n, _)| n.starts_with(&top)),
                "{c}: {names:?}"
            );
            // Shars (dockerlogger, sdcadm) carry no image_uuid, as Triton's.
            let shar = spec.format == ImageFormat::Shar;
            assert_eq!(
                names.iter().any(|(n, _)| n == &format!("{top}image_uuid")),
                !shar,
                "{c}"
            );
        }
    }

    #[test]
    fn apm_agent_has_hooks_symlink_and_version() {
        let cat = Catalog::builtin();
        let spec = ImageSpec::for_component(cat.get("vm-agent").unwrap(), "1.9.2");
        assert!(spec.version.starts_with("1.9.2-master-20261122T000000Z-g"));
        let img = build(&spec);
        let names = entries(&img);
        assert!(names.contains(&("vm-agent/node".to_string(), tar::EntryType::Symlink)));
        assert!(
            names
                .iter()
                .any(|(n, _)| n == "vm-agent/npm/postinstall.sh")
        );
        assert_eq!(
            img.manifest.semver().unwrap(),
            semver::Version::new(1, 9, 2)
        );
        let dl = build(&ImageSpec::for_component(
            cat.get("dockerlogger").unwrap(),
            "1.0.0",
        ));
        assert_eq!(dl.manifest.files[0].compression, Compression::None);
    }

    #[test]
    fn writes_usbkey_pair() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Catalog::builtin();
        let img = build(&ImageSpec::for_component(
            cat.get("cn-agent").unwrap(),
            "2.0.0",
        ));
        let (m, f) = write_to_dir(&img, dir.path()).unwrap();
        let back: ImageManifest =
            serde_json::from_str(&std::fs::read_to_string(m).unwrap()).unwrap();
        assert_eq!(back, img.manifest);
        assert_eq!(std::fs::read(f).unwrap(), img.file);
    }
}
