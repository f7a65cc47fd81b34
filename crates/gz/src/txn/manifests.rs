//! The SMF manifests an apm package's postinstall writes into apm's SMF
//! directory (`opt/smartdc/agents/smf`, on SmartOS a loopback mount of
//! `/var/svc/manifest/site`, whose manifests are imported at every boot).
//!
//! Before the postinstall runs, the directory is read (every `*.xml`, at
//! any depth: content and mtime). After it:
//! - each manifest its templates stand for must have been written
//!   (agentsadm never renders a package's templates);
//! - every other file it wrote, changed or deleted is journaled (a
//!   rollback removes or restores it). One named after the component
//!   (`<pkg>.xml`, `<pkg>-*.xml`) is the component's: imported with it and
//!   removed with it. One named after a component installing at the same
//!   time in this run is that transaction's business. Anything else (named
//!   after another component or none, or in a subdirectory) fails the
//!   install: it would be imported at the next boot;
//! - immediately before each import, the manifest is checked again
//!   ([`claims::check_manifest`]): a regular file whose every service is
//!   the component's own, so a postinstall cannot point another
//!   component's service (or a system one) at its files.
//!
//! Where several parallel-safe components install at once, a file named
//! after no component that appears while their postinstalls overlap is
//! refused by each transaction that sees it: which one wrote it cannot be
//! told, and refusing it is the safe side.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use agentsadm_platform as platform;
use agentsadm_platform::blocking;
use agentsadm_types::bounded;
use agentsadm_types::catalog::{Catalog, Component};

use super::super::kinds;
use super::super::kinds::claims;
use super::super::kinds::claims::ClaimError;
use super::super::paths::GzPaths;
use super::super::step::Step;
use super::Journal;
use super::TxnEnv;
use super::TxnError;
use super::aside_dir;
use super::fs_err;
use super::write_journal;

/// Files read from the SMF directory at most (a postinstall that writes
/// more is hostile; what is past the limit is not looked at).
const MAX_FILES: usize = 10_000;

/// A file's content (a link: its target, marked) and mtime.
type FileState = (Vec<u8>, Option<SystemTime>);

/// A manifest template of an installed apm tree and the manifest its
/// postinstall renders it to (root-relative).
struct Expected {
    template: PathBuf,
    output: String,
}

/// What the postinstall must write, and the SMF directory before it ran.
pub(super) struct Watch {
    expected: Vec<Expected>,
    before: BTreeMap<String, FileState>,
}

/// Read the SMF directory before the postinstall of the apm tree
/// `installed` runs. Blocking.
pub(super) fn before_postinstall(paths: &GzPaths, installed: &Path) -> Result<Watch, TxnError> {
    let list = kinds::template_outputs(installed).map_err(fs_err(
        Step::Smf,
        "list manifests of",
        installed,
    ))?;
    Ok(Watch {
        expected: list
            .into_iter()
            .map(|(template, output)| Expected { template, output })
            .collect(),
        before: scan(paths),
    })
}

/// Every `*.xml` under the SMF directory (root-relative) with its state.
fn scan(paths: &GzPaths) -> BTreeMap<String, FileState> {
    let mut out = BTreeMap::new();
    let mut stack = vec![paths.smf_dir()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_FILES {
                return out;
            }
            let path = e.path();
            let Ok(md) = fs::symlink_metadata(&path) else {
                continue;
            };
            if md.is_dir() {
                stack.push(path);
                continue;
            }
            if !e.file_name().to_string_lossy().ends_with(".xml") {
                continue;
            }
            let state = if md.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap_or_default();
                let mut marked = b"\0link\0".to_vec();
                marked.extend_from_slice(target.as_os_str().as_encoded_bytes());
                (marked, None)
            } else {
                (
                    crate::fsutil::read_small(&path).unwrap_or_default(),
                    md.modified().ok(),
                )
            };
            out.insert(paths.rel(&path), state);
        }
    }
    out
}

/// Whose a file the postinstall wrote is.
#[derive(Debug, PartialEq, Eq)]
enum Whose {
    /// One of the component's templates stands for it.
    Expected,
    /// Named after the component.
    Ours,
    /// Named after a component installing at the same time.
    Concurrent,
    /// Named after another component (or none), or in a subdirectory.
    Foreign(Option<String>),
}

fn whose(
    catalog: &Catalog,
    component: &Component,
    rel: &str,
    smf_dir: &str,
    expected: &BTreeSet<&str>,
    concurrent: &[String],
) -> Whose {
    if expected.contains(rel) {
        return Whose::Expected;
    }
    let Some(name) = rel
        .strip_prefix(smf_dir)
        .and_then(|r| r.strip_prefix('/'))
        .filter(|n| !n.contains('/'))
    else {
        return Whose::Foreign(None);
    };
    match claims::manifest_file_owner(catalog, name) {
        Some(c) if c.name == component.name => Whose::Ours,
        Some(c) if concurrent.iter().any(|n| c.name == *n) => Whose::Concurrent,
        owner => Whose::Foreign(owner.map(|c| c.name.to_string())),
    }
}

/// What the postinstall did to the SMF directory, sorted out.
#[derive(Default)]
struct Written {
    /// Its own manifests beyond its templates (to import).
    extras: Vec<String>,
    /// Files it created (a rollback removes them).
    absent: Vec<String>,
    /// Files it changed or deleted, whose content before is now in
    /// `<aside>/smf` (a rollback restores them).
    backed_up: Vec<String>,
    foreign: Option<(String, Option<String>)>,
}

/// Sort out what the postinstall wrote; save what it changed. Blocking.
fn sort_out(
    paths: &GzPaths,
    journal: &Journal,
    txn_dir: &Path,
    watch: &Watch,
    who: impl Fn(&str) -> Whose,
) -> Result<Written, TxnError> {
    let now = scan(paths);
    let mut out = Written::default();
    let touched: BTreeSet<&String> = watch.before.keys().chain(now.keys()).collect();
    for rel in touched {
        let (was, is) = (watch.before.get(rel), now.get(rel));
        if was == is {
            continue;
        }
        let owner = match who(rel) {
            Whose::Expected | Whose::Concurrent => continue,
            Whose::Ours => None,
            Whose::Foreign(owner) => Some(owner),
        };
        let journaled = journal.smf.absent.contains(rel) || journal.smf.backed_up.contains(rel);
        match was {
            _ if journaled => {}
            None => out.absent.push(rel.clone()),
            // A link is not restored as one; it was no manifest of ours.
            Some((content, _)) if content.starts_with(b"\0link\0") => {}
            Some((content, _)) => {
                let saved = aside_dir(paths, txn_dir).join("smf").join(rel);
                if let Some(parent) = saved.parent() {
                    fs::create_dir_all(parent).map_err(fs_err(Step::Smf, "create", parent))?;
                }
                fs::write(&saved, content).map_err(fs_err(Step::Smf, "back up", &saved))?;
                out.backed_up.push(rel.clone());
            }
        }
        match owner {
            None if is.is_some() => out.extras.push(rel.clone()),
            None => {}
            Some(owner) if out.foreign.is_none() => out.foreign = Some((rel.clone(), owner)),
            Some(_) => {}
        }
    }
    Ok(out)
}

/// Copy the manifest files a transaction may change aside (`<aside>/smf`,
/// the mode kept), before anything changes them: those there are
/// returned first, those absent second. Each is read as a regular file
/// only and at most [`bounded::MANIFEST`] bytes: one that is a link (out of
/// the tree), a FIFO, a device or huge fails the transaction, naming it,
/// rather than hanging it or filling the disk with its copy. Blocking.
pub(super) fn back_up(
    paths: &GzPaths,
    txn_dir: &Path,
    manifests: Vec<String>,
) -> Result<(Vec<String>, Vec<String>), TxnError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let (mut backed_up, mut absent) = (Vec::new(), Vec::new());
    for rel in manifests {
        let src = paths.at(&rel);
        let refused = |e: bounded::FileError| fs_err(Step::Smf, "back up", &src)(e.into_io());
        let Some(file) = bounded::open_regular(&src).map_err(refused)? else {
            absent.push(rel);
            continue;
        };
        let mode = file
            .metadata()
            .map_err(fs_err(Step::Smf, "back up", &src))?;
        let mut data = Vec::new();
        file.take(bounded::MANIFEST + 1)
            .read_to_end(&mut data)
            .map_err(fs_err(Step::Smf, "back up", &src))?;
        if data.len() as u64 > bounded::MANIFEST {
            return Err(refused(bounded::FileError::TooLarge {
                path: src.clone(),
                limit: bounded::MANIFEST,
            }));
        }
        let dst = aside_dir(paths, txn_dir).join("smf").join(&rel);
        fs::create_dir_all(dst.parent().unwrap_or(txn_dir)).map_err(fs_err(
            Step::Smf,
            "create",
            &dst,
        ))?;
        fs::write(&dst, &data).map_err(fs_err(Step::Smf, "back up", &dst))?;
        let perms = fs::Permissions::from_mode(mode.permissions().mode() & 0o7777);
        fs::set_permissions(&dst, perms).map_err(fs_err(Step::Smf, "back up", &dst))?;
        backed_up.push(rel);
    }
    Ok((backed_up, absent))
}

/// The names of the files in the SMF directory before the postinstall, as
/// the journal keeps them: a run killed mid-postinstall leaves files it
/// never saw, and the recovery's rollback removes the ones that are not
/// another component's ([`strays`]).
pub(super) fn listing(watch: &Watch) -> Vec<String> {
    watch.before.keys().cloned().collect()
}

/// After the postinstall (whether it succeeded or not): journal every
/// file it wrote, changed or deleted (a rollback undoes them) and add its
/// own extra manifests to what is imported. Returns the refusal of a file
/// that is not the component's, if it wrote one.
pub(super) async fn journal_written(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
    txn_dir: &Path,
    watch: Watch,
) -> Result<(Watch, Option<TxnError>), TxnError> {
    let paths = env.paths().clone();
    let (catalog, me, concurrent) = (
        env.catalog.clone(),
        component.clone(),
        env.concurrent.to_vec(),
    );
    let (j, dir) = (journal.clone(), txn_dir.to_path_buf());
    let (written, watch) = blocking(move || {
        let smf_dir = paths.rel(&paths.smf_dir());
        let expected: BTreeSet<&str> = watch.expected.iter().map(|e| e.output.as_str()).collect();
        let written = sort_out(&paths, &j, &dir, &watch, |rel| {
            whose(&catalog, &me, rel, &smf_dir, &expected, &concurrent)
        });
        (written, watch)
    })
    .await;
    let written = written?;
    journal.smf.absent.extend(written.absent.iter().cloned());
    journal
        .smf
        .backed_up
        .extend(written.backed_up.iter().cloned());
    if let Some(new) = journal.change.installing_mut() {
        for rel in &written.extras {
            if !new.smf_manifests.contains(rel) {
                new.smf_manifests.push(rel.clone());
            }
        }
    }
    if !written.absent.is_empty() || !written.backed_up.is_empty() || !written.extras.is_empty() {
        write_journal(env, journal).await?;
    }
    let refused = written
        .foreign
        .map(|(file, owner)| TxnError::ManifestRefused {
            component: component.name.to_string(),
            manifest: file.clone(),
            err: Box::new(ClaimError::ForeignFile {
                component: component.name.to_string(),
                package: component.package_name().to_string(),
                file,
                owner,
            }),
        });
    Ok((watch, refused))
}

/// After a successful postinstall: check that it wrote each manifest its
/// templates stand for, and snapshot the services of what is about to be
/// imported, so a rollback deletes the new ones.
pub(super) async fn check_written(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
    watch: Watch,
) -> Result<(), TxnError> {
    let paths = env.paths().clone();
    let name = component.name.clone();
    blocking(move || all_written(&paths, &name, &watch)).await?;
    snapshot_new_services(env, component, journal).await
}

/// Files in the SMF directory now that were not there before the
/// postinstall (`before`, from the journal) and are named after
/// `component` or no component: what a postinstall killed with the
/// installer wrote. Blocking.
pub fn strays(
    paths: &GzPaths,
    catalog: &Catalog,
    component: &str,
    before: &[String],
) -> Vec<String> {
    scan(paths)
        .into_keys()
        .filter(|rel| !before.contains(rel))
        .filter(|rel| {
            let name = Path::new(rel)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            claims::manifest_file_owner(catalog, &name).is_none_or(|c| c.name == component)
        })
        .collect()
}

/// Every manifest the templates stand for was written by the postinstall
/// (apm renders nothing; each agent's postinstall does, with values only
/// it knows). One missing, or left as it was before the postinstall ran,
/// fails the install: importing a stale manifest, or one rendered with
/// guessed values, would leave a service that cannot start.
fn all_written(paths: &GzPaths, component: &str, watch: &Watch) -> Result<(), TxnError> {
    let now = scan(paths);
    for Expected { template, output } in &watch.expected {
        let is = now.get(output);
        // Written (even with the same content): a new file, or new
        // content or mtime.
        if is.is_none() || is == watch.before.get(output) {
            return Err(TxnError::ManifestNotWritten {
                component: component.to_string(),
                manifest: paths.at(output),
                template: paths.rel(template),
                stale: is.is_some(),
            });
        }
    }
    Ok(())
}

/// The state of each instance in the component's namespace that the
/// manifests about to be imported declare and the snapshot lacks, so that
/// a rollback deletes what the import creates.
async fn snapshot_new_services(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
) -> Result<(), TxnError> {
    let files: Vec<PathBuf> = journal
        .change
        .installing()
        .into_iter()
        .flat_map(|n| n.smf_manifests.iter())
        .map(|rel| env.paths().at(rel))
        .collect();
    let found = blocking(move || {
        files
            .iter()
            .filter_map(|f| platform::read_manifest_instances(f).ok())
            .flatten()
            .map(|i| i.fmri)
            .collect::<BTreeSet<String>>()
    })
    .await;
    let mut added = false;
    for fmri in found {
        if journal.smf.services.contains_key(&fmri)
            || !claims::in_namespace(env.catalog, component, &fmri)
        {
            continue;
        }
        let state = env
            .platform
            .smf_state(&fmri)
            .await
            .map_err(|err| TxnError::Smf {
                action: "state query",
                target: fmri.clone(),
                err: Box::new(err),
            })?;
        journal.smf.services.insert(fmri, state);
        added = true;
    }
    if added {
        write_journal(env, journal).await?;
    }
    Ok(())
}

/// Check a manifest immediately before it is imported for `component`.
/// Blocking.
pub(super) fn check_before_import(
    env_catalog: &Catalog,
    component: &Component,
    others: Option<&BTreeMap<String, claims::Claims>>,
    paths: &GzPaths,
    rel: &str,
) -> Result<(), TxnError> {
    claims::check_manifest(env_catalog, component, &paths.at(rel), rel, others).map_err(|err| {
        TxnError::ManifestRefused {
            component: component.name.to_string(),
            manifest: rel.to_string(),
            err: Box::new(err),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_sorted_by_name() {
        let cat = Catalog::builtin();
        let vm = cat.get("vm-agent").unwrap();
        let smf = "opt/smartdc/agents/smf";
        let expected = BTreeSet::from(["opt/smartdc/agents/smf/vm-agent.xml"]);
        let w = |rel: &str, concurrent: &[String]| whose(&cat, vm, rel, smf, &expected, concurrent);
        assert_eq!(
            w("opt/smartdc/agents/smf/vm-agent.xml", &[]),
            Whose::Expected
        );
        assert_eq!(
            w("opt/smartdc/agents/smf/vm-agent-extra.xml", &[]),
            Whose::Ours
        );
        assert_eq!(
            w("opt/smartdc/agents/smf/net-agent.xml", &[]),
            Whose::Foreign(Some("net-agent".into()))
        );
        assert_eq!(
            w(
                "opt/smartdc/agents/smf/net-agent.xml",
                &["net-agent".into()]
            ),
            Whose::Concurrent
        );
        assert_eq!(
            w("opt/smartdc/agents/smf/evil.xml", &[]),
            Whose::Foreign(None)
        );
        assert_eq!(
            w("opt/smartdc/agents/smf/sub/vm-agent.xml", &[]),
            Whose::Foreign(None)
        );
        let cn = cat.get("cn-agent").unwrap();
        assert_eq!(
            claims::manifest_file_owner(&cat, "cn-agent-update.xml").map(|c| &c.name),
            Some(&cn.name)
        );
        assert_eq!(
            claims::manifest_file_owner(&cat, "marlin-agent.xml").map(|c| c.name.as_str()),
            Some("marlin-agent")
        );
        assert!(claims::manifest_file_owner(&cat, "vm-agentx.xml").is_none());
        assert!(claims::manifest_file_owner(&cat, "vm-agent-.xml").is_none());
    }

    /// The copy aside of a manifest is bounded: a huge file, a FIFO, a
    /// link out of the tree or to a device fails the transaction naming
    /// it, and copies nothing (main copied a link's target from outside
    /// the tree, and any size); a real manifest is copied, its mode kept.
    #[test]
    fn manifests_are_backed_up_bounded() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.xml");
        fs::write(&secret, "<secret/>").unwrap();
        let paths = GzPaths::new(root.path());
        let txn_dir = paths.state_dir().join("txn").join("vm-agent.0001");
        let smf = "opt/smartdc/agents/smf";
        fs::create_dir_all(paths.at(smf)).unwrap();
        let rel = |n: &str| format!("{smf}/{n}");
        let huge = fs::File::create(paths.at(rel("huge.xml"))).unwrap();
        huge.set_len(64 << 20).unwrap();
        std::os::unix::fs::symlink(&secret, paths.at(rel("out.xml"))).unwrap();
        std::os::unix::fs::symlink("/dev/zero", paths.at(rel("zero.xml"))).unwrap();
        let c = std::ffi::CString::new(
            paths
                .at(rel("fifo.xml"))
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let aside = aside_dir(&paths, &txn_dir).join("smf");
        for bad in ["huge.xml", "out.xml", "zero.xml", "fifo.xml"] {
            let err = back_up(&paths, &txn_dir, vec![rel(bad)]).unwrap_err();
            assert!(err.to_string().contains(bad), "{bad}: {err}");
            assert!(!aside.join(rel(bad)).exists(), "{bad} was copied");
        }
        fs::write(paths.at(rel("vm-agent.xml")), "<bundle/>").unwrap();
        fs::set_permissions(
            paths.at(rel("vm-agent.xml")),
            fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        let (saved, absent) =
            back_up(&paths, &txn_dir, vec![rel("vm-agent.xml"), rel("gone.xml")]).unwrap();
        assert_eq!(
            (saved, absent),
            (vec![rel("vm-agent.xml")], vec![rel("gone.xml")])
        );
        let copy = aside.join(rel("vm-agent.xml"));
        assert_eq!(fs::read(&copy).unwrap(), b"<bundle/>");
        assert_eq!(
            fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(fs::read(&secret).unwrap(), b"<secret/>");
    }
}
