//! Seed templates: the first server of each role and image set gets a real
//! install into a scratch directory; its files are kept in memory and
//! written as every other server of that role, with the template's paths
//! and UUIDs replaced (module docs of [`super`], "Seeding").

use agentsadm_types::error::error_chain;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use agentsadm_api::remote::AgentsReport;
use agentsadm_gz::fetch::ImageSource;
use agentsadm_gz::layout::Layout;
use agentsadm_gz::layout::mockcloud::MockcloudGz;
use agentsadm_gz::paths::GzPaths;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

use super::installer::prepare_err;

use super::GzLayout;
use super::GzOpError;
use super::GzTarget;
use super::ImageLookup;
use super::InstallerGz;
use super::SeededComponent;
use super::installer::write_sysinfo;

/// A role and its seeded image set (name order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TemplateKey {
    headnode: bool,
    images: Vec<(String, ImageUuid)>,
}

impl TemplateKey {
    pub(super) fn new(headnode: bool, seeded: &[SeededComponent]) -> TemplateKey {
        let mut images: Vec<(String, ImageUuid)> = seeded
            .iter()
            .map(|s| (s.name.clone(), s.image_uuid))
            .collect();
        images.sort();
        TemplateKey { headnode, images }
    }

    fn role(&self) -> &'static str {
        if self.headnode {
            "headnode"
        } else {
            "compute node"
        }
    }
}

/// One thing in a template server's directory.
#[derive(Debug)]
enum Node {
    Dir {
        mode: u32,
    },
    File {
        data: Bytes,
        mode: u32,
        /// Holds a template token (path, server or instance UUID).
        patch: bool,
    },
    Link {
        target: String,
    },
}

/// A server the installer set up, held in memory (module docs).
#[derive(Debug)]
pub(super) struct Template {
    /// The template server's directory, as it appears in files.
    dir: String,
    server: ServerUuid,
    /// Component name to the instance UUID the install created.
    instances: BTreeMap<String, InstanceUuid>,
    /// Server-relative paths, parents before children.
    nodes: Vec<(PathBuf, Node)>,
    pub(super) report: AgentsReport,
}

impl Template {
    /// Install the key's images for real into `scratch` and read the
    /// result into memory.
    pub(super) fn build(
        gz: &InstallerGz,
        key: &TemplateKey,
        scratch: &Path,
        images: ImageLookup<'_>,
    ) -> Result<Template, GzOpError> {
        let fail = |detail: String| GzOpError::Template {
            role: key.role(),
            dir: scratch.to_path_buf(),
            detail,
        };
        let io_fail = |what: &str, path: &Path, e: io::Error| {
            fail(format!("cannot {what} {}: {e}", path.display()))
        };
        let server = ServerUuid::new_v4();
        let target = GzTarget {
            server_uuid: server,
            hostname: "seed-template".into(),
            headnode: key.headnode,
            datacenter: "template".into(),
            admin_ip: "127.0.0.1".into(),
            root: scratch.join("servers").join(server.to_string()),
        };
        let _ = agentsadm_gz::fsutil::remove_any(scratch);
        InstallerGz::prepare_empty(&target)?;
        // The images as files, the way headnode setup finds them on the
        // USB key (outside the server's directory).
        let files = scratch.join("images");
        std::fs::create_dir_all(&files).map_err(|e| io_fail("create", &files, e))?;
        let mut sources = Vec::new();
        for (_, uuid) in &key.images {
            let img = images(*uuid).ok_or(GzOpError::MissingImage { image: *uuid })?;
            let file = files.join(format!("{uuid}.file"));
            let manifest = files.join(format!("{uuid}.manifest"));
            std::fs::write(&file, &img.file).map_err(|e| io_fail("write", &file, e))?;
            let text = serde_json::to_vec(&img.manifest).unwrap_or_default();
            std::fs::write(&manifest, text).map_err(|e| io_fail("write", &manifest, e))?;
            sources.push(ImageSource::File { file, manifest });
        }
        let mut settings = gz.settings(None, &target)?;
        settings.no_sapi = true;
        settings.headnode = Some(key.headnode);
        // The installer is async; seeding is not. A thread of its own with
        // its own runtime keeps this usable from inside any runtime.
        let run = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let installed = rt.block_on(agentsadm_gz::install(settings.clone(), &sources));
                let report = rt.block_on(agentsadm_gz::report(settings));
                Ok::<_, io::Error>((installed, report))
            })
            .join()
        });
        let (installed, report) = match run {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(fail(format!("cannot start a runtime: {e}"))),
            Err(_) => return Err(fail("the install thread panicked".into())),
        };
        if let Some(e) = &installed.error {
            return Err(fail(format!(
                "{}{} failed: {}",
                e.component
                    .as_deref()
                    .map(|c| format!("{c}: "))
                    .unwrap_or_default(),
                e.step,
                e.message
            )));
        }
        let report = report.map_err(|e| fail(error_chain(&e)))?;
        if !report.errors.is_empty() {
            return Err(fail(format!("its report has errors: {:?}", report.errors)));
        }
        let instances: BTreeMap<String, InstanceUuid> = installed
            .components
            .iter()
            .filter_map(|c| c.instance_uuid.map(|i| (c.name.to_string(), i)))
            .collect();
        let dir = target.root.display().to_string();
        let mut tokens = vec![dir.clone(), server.to_string()];
        tokens.extend(instances.values().map(|i| i.to_string()));
        // Per-run files: the lock (its holder) and the sysinfo (per server).
        let skip: Vec<PathBuf> = vec![
            PathBuf::from(agentsadm_gz::paths::SYSINFO_FILE),
            match gz.layout() {
                GzLayout::Rooted => GzPaths::new("").lock_file(),
                GzLayout::Mockcloud => MockcloudGz::new(Path::new(""), server)
                    .paths()
                    .lock_file()
                    .strip_prefix(format!("servers/{server}"))
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
            },
        ];
        let mut nodes = Vec::new();
        snapshot(&target.root, Path::new(""), &skip, &tokens, &mut nodes)
            .map_err(|e| io_fail("read", &target.root, e))?;
        Ok(Template {
            dir,
            server,
            instances,
            nodes,
            report,
        })
    }

    /// Template instance UUID to the server's, as strings.
    pub(super) fn instance_map(&self, seeded: &[SeededComponent]) -> HashMap<String, String> {
        self.instances
            .iter()
            .filter_map(|(name, t)| {
                seeded
                    .iter()
                    .find(|s| s.name == *name)
                    .map(|s| (t.to_string(), s.instance_uuid.to_string()))
            })
            .collect()
    }

    /// Write the template as `target`'s GZ.
    pub(super) fn write(
        &self,
        target: &GzTarget,
        seeded: &[SeededComponent],
    ) -> Result<(), GzOpError> {
        let mut tokens: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (
                self.dir.as_bytes().to_vec(),
                target.root.display().to_string().into_bytes(),
            ),
            (
                self.server.to_string().into_bytes(),
                target.server_uuid.to_string().into_bytes(),
            ),
        ];
        tokens.extend(
            self.instance_map(seeded)
                .into_iter()
                .map(|(a, b)| (a.into_bytes(), b.into_bytes())),
        );
        let root = &target.root;
        std::fs::create_dir_all(root).map_err(prepare_err(target, "create", root))?;
        for (rel, node) in &self.nodes {
            let path = root.join(rel);
            match node {
                Node::Dir { mode } => std::fs::DirBuilder::new()
                    .mode(*mode)
                    .create(&path)
                    .map_err(prepare_err(target, "create", &path))?,
                Node::File { data, mode, patch } => {
                    let patched;
                    let data: &[u8] = if *patch {
                        patched = replace_tokens(data, &tokens);
                        &patched
                    } else {
                        data
                    };
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(*mode)
                        .open(&path)
                        .map_err(prepare_err(target, "create", &path))?;
                    io::Write::write_all(&mut f, data)
                        .map_err(prepare_err(target, "write", &path))?;
                }
                Node::Link { target: to } => {
                    let to = replace_tokens(to.as_bytes(), &tokens);
                    let to = String::from_utf8_lossy(&to).into_owned();
                    std::os::unix::fs::symlink(&to, &path)
                        .map_err(prepare_err(target, "link", &path))?;
                }
            }
        }
        write_sysinfo(target)
    }
}

/// Read `dir` (relative `rel` under the template root) into `out`, parents
/// first, in name order.
fn snapshot(
    root: &Path,
    rel: &Path,
    skip: &[PathBuf],
    tokens: &[String],
    out: &mut Vec<(PathBuf, Node)>,
) -> io::Result<()> {
    let dir = root.join(rel);
    let mut names: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        if skip.contains(&rel) {
            continue;
        }
        let path = root.join(&rel);
        let md = std::fs::symlink_metadata(&path)?;
        let mode = md.permissions().mode() & 0o7777;
        if md.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?.display().to_string();
            out.push((rel, Node::Link { target }));
        } else if md.is_dir() {
            out.push((rel.clone(), Node::Dir { mode }));
            snapshot(root, &rel, skip, tokens, out)?;
        } else {
            let data = Bytes::from(std::fs::read(&path)?);
            let patch = tokens.iter().any(|t| contains(&data, t.as_bytes()));
            out.push((rel, Node::File { data, mode, patch }));
        }
    }
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// `data` with every occurrence of each `from` replaced by its `to`.
fn replace_tokens(data: &[u8], tokens: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut cur = data.to_vec();
    for (from, to) in tokens {
        if from.is_empty() || !contains(&cur, from) {
            continue;
        }
        let mut next = Vec::with_capacity(cur.len());
        let mut i = 0;
        while i < cur.len() {
            if cur[i..].starts_with(from) {
                next.extend_from_slice(to);
                i += from.len();
            } else {
                next.push(cur[i]);
                i += 1;
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_replaced_everywhere() {
        let t = vec![
            (b"/t/root".to_vec(), b"/servers/abc".to_vec()),
            (b"1111".to_vec(), b"2222".to_vec()),
        ];
        assert_eq!(
            replace_tokens(b"x=/t/root/opt 1111 /t/root\n", &t),
            b"x=/servers/abc/opt 2222 /servers/abc\n"
        );
        assert_eq!(replace_tokens(b"nothing", &t), b"nothing");
        assert!(contains(b"abc", b"bc"));
        assert!(!contains(b"abc", b""));
    }
}
