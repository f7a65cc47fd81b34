//! The swap of one component as a transaction with a journal.
//!
//! An install or upgrade, once the new version is staged and verified:
//! 1. plan: snapshot the component's SMF services (state of every instance
//!    its old and new manifests define, plus the catalog's) and copy its
//!    manifest files aside; choose the instance UUID (kept, or new);
//! 2. write the journal (`journal/<component>.json`, fsynced) — from here on
//!    any failure, or a kill and the next run's recovery, rolls back;
//! 3. old package: `preuninstall`, `postuninstall` (cwd = installed dir),
//!    unlink its links, move its tree and overlay files into `<txn>/old`;
//! 4. new package: `preinstall` (cwd = the staged copy), rename the staged
//!    tree into place and lay the overlay files, create links (apm bins are
//!    chmod 0755 and linked relative, as apm does), `postinstall` (cwd =
//!    installed dir);
//! 5. SMF: apm packages' `smf/manifests/*.xml.in` are rendered into
//!    `opt/smartdc/agents/smf` unless the postinstall already did, then every
//!    manifest of the new version is imported through the [`Platform`];
//! 6. SAPI adoption (unless `--no-sapi`);
//! 7. the journal moves to `committing`; the old version becomes
//!    `previous/<component>` (for `gz rollback`), the staging directory and
//!    the journal are removed. A commit interrupted midway is finished by the
//!    next run.
//!
//! Rollback (a failed step, or recovery of a `swapping` journal) undoes in
//! reverse and keeps going past errors, reporting them: new links and files
//! go, the old tree and files move back, the old links return, a newly
//! created instance UUID file goes, the old SMF manifests are restored and
//! re-imported, services the new version added are deleted, and each
//! instance is enabled or disabled as it was (enabled ones are restarted so
//! they run the restored code). Today's cn-agent does not re-import; we do.
//!
//! Not rolled back: what hooks did outside the package, the SMF manifests and
//! services aside (files they wrote under `etc/`, calls they made); an
//! adoption already recorded in SAPI when a kill lands between adoption and
//! commit (the next `agentsadm check` reports the image drift).
//!
//! Test checkpoints (`AGENTSADM_TEST_CRASH_AT=<name>` aborts the process
//! there, `wait:<name>` stops there until killed; see
//! [`super::test_checkpoint`]): `mid-unpack` and `downloaded` (fetch),
//! `staged` (before the journal), `after-journal`, `after-preuninstall`,
//! `after-postuninstall`, `after-old-hooks`, `after-move-old`,
//! `after-preinstall`, `after-place-new`, `after-postinstall`, `after-smf`,
//! `after-adopt`, `committing`, `after-previous`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::SapiClient;
use crate::catalog::Component;
use crate::ids::{InstanceUuid, ServerUuid};

use super::adopt::{self, AdoptError, Adoption};
use super::fsutil;
use super::hooks::{self, HookEnv, HookError};
use super::kinds::{self, Footprint, Link, StagedVersion};
use super::package::{Hook, PackageError, PackageJson};
use super::paths::GzPaths;
use super::platform::{self, Platform, PlatformError, ServiceState};

/// What a transaction does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Install,
    Remove,
    /// `gz rollback`: install the kept previous version.
    Rollback,
}

/// Where a transaction is; decides what recovery does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Changes may be half done: recovery rolls back.
    Swapping,
    /// Everything succeeded: recovery finishes the commit.
    Committing,
}

/// SMF state before the transaction, to restore on rollback.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmfSnapshot {
    /// Every instance the component's old and new manifests define (and the
    /// catalog lists): its state, `None` if it did not exist.
    pub services: BTreeMap<String, Option<ServiceState>>,
    /// Manifest files that existed, copied to `<txn>/old/smf/<rel>`.
    pub backed_up: Vec<String>,
    /// Manifest files that did not exist (removed on rollback).
    pub absent: Vec<String>,
}

/// The journal: everything recovery needs, written before the first change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    /// The transaction directory's name under `staging/`.
    pub txn: String,
    pub op: Op,
    pub component: String,
    pub phase: Phase,
    /// The installed version before (None: fresh install).
    pub old: Option<Footprint>,
    /// The version being installed (None: removal).
    pub new: Option<Footprint>,
    /// The instance UUID file (root-relative) and whether this transaction
    /// created it.
    pub instance_file: String,
    pub instance: Option<InstanceUuid>,
    pub instance_created: bool,
    /// Directories that did not exist and may be created (removed on
    /// rollback when empty), root-relative, shallowest first.
    pub created_dirs: Vec<String>,
    pub smf: SmfSnapshot,
}

/// The SAPI side of a transaction.
#[derive(Clone, Copy, Debug)]
pub struct SapiTarget<'a> {
    pub client: &'a SapiClient,
    pub server: ServerUuid,
}

/// What a transaction needs from its surroundings.
#[derive(Clone, Copy, Debug)]
pub struct TxnEnv<'a> {
    pub paths: &'a GzPaths,
    pub platform: &'a dyn Platform,
    pub hooks: &'a HookEnv,
    /// `AGENTSADM_TEST_CRASH_AT`.
    pub crash_at: Option<&'a str>,
    /// `None` with `--no-sapi`.
    pub sapi: Option<SapiTarget<'a>>,
}

impl TxnEnv<'_> {
    /// Abort (or wait to be killed) at a named point, for crash tests.
    pub fn checkpoint(&self, name: &str) {
        super::test_checkpoint(self.crash_at, name);
    }
}

/// A step of a transaction that failed.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error("{hook} of {package} failed")]
    Hook {
        hook: Hook,
        package: String,
        #[source]
        err: Box<HookError>,
    },
    #[error("cannot {action} {path}")]
    Fs {
        step: &'static str,
        action: &'static str,
        path: PathBuf,
        #[source]
        err: io::Error,
    },
    #[error("SMF {action} of {target} failed")]
    Smf {
        action: &'static str,
        target: String,
        #[source]
        err: Box<PlatformError>,
    },
    #[error("SAPI adoption failed")]
    Sapi {
        #[source]
        err: AdoptError,
    },
    #[error("SAPI instance removal failed")]
    SapiRemove {
        #[source]
        err: AdoptError,
    },
    #[error("instance UUID file {path} holds {content:?}, which is not a UUID; fix or remove it")]
    InstanceCorrupt { path: PathBuf, content: String },
    #[error("{path} exists and is not a link agentsadm manages; move it away and retry")]
    LinkConflict { path: PathBuf },
    #[error("the installed package.json of {package} is unreadable")]
    Package {
        package: String,
        #[source]
        err: PackageError,
    },
    #[error("cannot write the journal {path}")]
    Journal {
        path: PathBuf,
        #[source]
        err: io::Error,
    },
}

impl TxnError {
    pub fn step(&self) -> String {
        match self {
            TxnError::Hook { hook, .. } => hook.step().to_string(),
            TxnError::Fs { step, .. } => step.to_string(),
            TxnError::Smf { .. } => "smf".into(),
            TxnError::Sapi { .. } | TxnError::SapiRemove { .. } => "sapi".into(),
            TxnError::InstanceCorrupt { .. } => "instance".into(),
            TxnError::LinkConflict { .. } => "swap".into(),
            TxnError::Package { .. } => "swap".into(),
            TxnError::Journal { .. } => "journal".into(),
        }
    }
}

/// A failed transaction: the error, and what went wrong while undoing it
/// (empty when the rollback was complete).
#[derive(Debug)]
pub struct TxnFailure {
    pub error: TxnError,
    pub rollback_errors: Vec<String>,
    /// Whether anything had changed (false: failed before the journal).
    pub rolled_back: bool,
}

/// A successful transaction.
#[derive(Clone, Debug)]
pub struct TxnOutcome {
    pub instance: Option<InstanceUuid>,
    pub adoption: Option<Adoption>,
}

fn fs_err(
    step: &'static str,
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> TxnError {
    let path = path.to_path_buf();
    move |err| TxnError::Fs {
        step,
        action,
        path,
        err,
    }
}

/// A fresh transaction directory name.
pub fn new_txn_name(component: &str) -> String {
    format!("{component}.{:08x}", rand::random::<u32>())
}

/// The instance UUID to use: the kept one, or a new one (`true`).
fn plan_instance(path: &Path) -> Result<(InstanceUuid, bool), TxnError> {
    match fsutil::read_trimmed(path) {
        Ok(Some(s)) if !s.is_empty() => match s.parse() {
            Ok(u) => Ok((u, false)),
            Err(_) => Err(TxnError::InstanceCorrupt {
                path: path.to_path_buf(),
                content: s.chars().take(80).collect(),
            }),
        },
        Ok(_) => Ok((InstanceUuid::new_v4(), true)),
        Err(err) => Err(TxnError::Fs {
            step: "instance",
            action: "read the instance UUID file",
            path: path.to_path_buf(),
            err,
        }),
    }
}

/// Instances defined by existing manifest files (unreadable ones skipped).
fn manifest_fmris(paths: &GzPaths, rels: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rel in rels {
        if let Ok(list) = platform::read_manifest_instances(&paths.at(rel)) {
            out.extend(list.into_iter().map(|i| i.fmri));
        }
    }
    out
}

/// Take the SMF snapshot and copy the manifest files aside.
fn snapshot_smf(
    env: &TxnEnv<'_>,
    component: &Component,
    txn_dir: &Path,
    old: Option<&Footprint>,
    new: Option<&Footprint>,
    staged_templates: &[PathBuf],
) -> Result<SmfSnapshot, TxnError> {
    let mut fmris: BTreeSet<String> = component.smf_services.iter().cloned().collect();
    let mut manifests: BTreeSet<String> = BTreeSet::new();
    for f in [old, new].into_iter().flatten() {
        manifests.extend(f.smf_manifests.iter().cloned());
    }
    let manifests: Vec<String> = manifests.into_iter().collect();
    fmris.extend(manifest_fmris(env.paths, &manifests));
    for t in staged_templates {
        if let Ok(list) = platform::read_manifest_instances(t) {
            fmris.extend(list.into_iter().map(|i| i.fmri));
        }
    }
    let mut snap = SmfSnapshot::default();
    for fmri in fmris {
        let state = env.platform.smf_state(&fmri).map_err(|err| TxnError::Smf {
            action: "state query",
            target: fmri.clone(),
            err: Box::new(err),
        })?;
        snap.services.insert(fmri, state);
    }
    for rel in manifests {
        let src = env.paths.at(&rel);
        if src.is_file() {
            let dst = txn_dir.join("old/smf").join(&rel);
            fs::create_dir_all(dst.parent().unwrap_or(txn_dir))
                .map_err(fs_err("smf", "create", &dst))?;
            fs::copy(&src, &dst).map_err(fs_err("smf", "back up", &src))?;
            snap.backed_up.push(rel);
        } else {
            snap.absent.push(rel);
        }
    }
    Ok(snap)
}

/// Directories (root-relative) that the new version's paths need and that
/// do not exist yet.
fn missing_dirs(paths: &GzPaths, new: Option<&Footprint>, instance_file: &str) -> Vec<String> {
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    let mut add_parents = |rel: &str| {
        let mut p = Path::new(rel).parent();
        while let Some(dir) = p {
            if dir.as_os_str().is_empty() {
                break;
            }
            wanted.insert(dir.to_string_lossy().into_owned());
            p = dir.parent();
        }
    };
    if let Some(f) = new {
        if let Some(t) = &f.tree {
            add_parents(t);
        }
        for o in &f.overlay {
            add_parents(o);
        }
        for l in &f.links {
            add_parents(&l.path);
        }
        for m in &f.smf_manifests {
            add_parents(m);
        }
    }
    add_parents(instance_file);
    let mut out: Vec<String> = wanted
        .into_iter()
        .filter(|d| !paths.at(d).exists())
        .collect();
    // Shallowest first (creation order); rollback walks it backwards.
    out.sort_by_key(|d| (d.matches('/').count(), d.clone()));
    out
}

fn write_journal(env: &TxnEnv<'_>, journal: &Journal) -> Result<(), TxnError> {
    let path = env.paths.journal_file(&journal.component);
    let mut text = serde_json::to_vec_pretty(journal).unwrap_or_default();
    text.push(b'\n');
    fsutil::write_atomic(&path, &text).map_err(|err| TxnError::Journal { path, err })
}

/// Read a journal file.
pub fn read_journal(path: &Path) -> io::Result<Journal> {
    let bytes = fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Install (or, for `Op::Rollback`, restore) `staged` in place of `old`.
/// `txn_dir` is `staging/<txn>` holding the staged files.
pub async fn install(
    env: &TxnEnv<'_>,
    component: &Component,
    op: Op,
    txn_dir: &Path,
    staged: &StagedVersion,
    old: Option<Footprint>,
) -> Result<TxnOutcome, TxnFailure> {
    let before = |error| TxnFailure {
        error,
        rollback_errors: Vec::new(),
        rolled_back: false,
    };
    let instance_file = kinds::instance_rel(component);
    let (instance, instance_created) =
        plan_instance(&env.paths.at(&instance_file)).map_err(before)?;
    let templates: Vec<PathBuf> = match &staged.tree_src {
        Some(src) if staged.footprint.apm => kinds::template_outputs(src)
            .unwrap_or_default()
            .into_iter()
            .map(|(t, _)| t)
            .collect(),
        _ => Vec::new(),
    };
    let smf = snapshot_smf(
        env,
        component,
        txn_dir,
        old.as_ref(),
        Some(&staged.footprint),
        &templates,
    )
    .map_err(before)?;
    let mut journal = Journal {
        version: 1,
        txn: txn_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        op,
        component: component.name.clone(),
        phase: Phase::Swapping,
        created_dirs: missing_dirs(env.paths, Some(&staged.footprint), &instance_file),
        old,
        new: Some(staged.footprint.clone()),
        instance_file,
        instance: Some(instance),
        instance_created,
        smf,
    };
    write_journal(env, &journal).map_err(before)?;
    env.checkpoint("after-journal");
    match swap_in(env, component, &journal, txn_dir, staged, instance).await {
        Ok(adoption) => {
            journal.phase = Phase::Committing;
            if let Err(error) = write_journal(env, &journal) {
                let rollback_errors = rollback(env, &journal);
                return Err(TxnFailure {
                    error,
                    rollback_errors,
                    rolled_back: true,
                });
            }
            env.checkpoint("committing");
            commit(env, &journal);
            Ok(TxnOutcome {
                instance: Some(instance),
                adoption,
            })
        }
        Err(error) => {
            tracing::warn!(component = %component.name, error = %crate::error::error_chain(&error), "rolling back");
            let rollback_errors = rollback(env, &journal);
            Err(TxnFailure {
                error,
                rollback_errors,
                rolled_back: true,
            })
        }
    }
}

/// Steps 3-6 of an install; any error is rolled back by the caller.
async fn swap_in(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &Journal,
    txn_dir: &Path,
    staged: &StagedVersion,
    instance: InstanceUuid,
) -> Result<Option<Adoption>, TxnError> {
    let paths = env.paths;
    if journal.instance_created {
        let path = paths.at(&journal.instance_file);
        fsutil::write_atomic(&path, format!("{instance}\n").as_bytes()).map_err(fs_err(
            "instance",
            "write the instance UUID file",
            &path,
        ))?;
    }
    // 3. The old package out.
    if let Some(old) = &journal.old {
        remove_old(env, old, txn_dir).await?;
    }
    move_overlay_out(paths, journal.new.as_ref(), txn_dir, journal.old.as_ref())?;
    env.checkpoint("after-move-old");
    let new = &staged.footprint;
    // 4. The new package in.
    if let (Some(pkg), Some(src)) = (&staged.package, &staged.tree_src) {
        run_hook(env, Hook::Preinstall, pkg, src).await?;
    }
    if let (Some(dest), Some(src)) = (&new.tree, &staged.tree_src) {
        let dest = paths.at(dest);
        fsutil::rename_into(src, &dest).map_err(fs_err(
            "swap",
            "move the new version into",
            &dest,
        ))?;
    }
    if let Some(root) = &staged.overlay_src {
        for rel in &new.overlay {
            let src = root.join(rel);
            let dst = paths.at(rel);
            fsutil::rename_into(&src, &dst).map_err(fs_err("swap", "place", &dst))?;
        }
    }
    env.checkpoint("after-place-new");
    if let (Some(pkg), Some(tree)) = (&staged.package, &new.tree) {
        // apm: bins are made executable before they are linked.
        for path in pkg.bin.values() {
            let target = paths.at(tree).join(super::package::clean_relative(path));
            if target.is_file() {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&target, fs::Permissions::from_mode(0o755))
                    .map_err(fs_err("swap", "chmod", &target))?;
            }
        }
    }
    for link in &new.links {
        make_link(paths, link)?;
    }
    if let (Some(pkg), Some(tree)) = (&staged.package, &new.tree) {
        let installed = paths.at(tree);
        let outputs = render_inputs(paths, &installed)?;
        run_hook(env, Hook::Postinstall, pkg, &installed).await?;
        render_manifests(env, pkg, &installed, &outputs)?;
    }
    // 5. SMF.
    for rel in &new.smf_manifests {
        let path = paths.at(rel);
        env.platform
            .smf_import(&path)
            .map_err(|err| TxnError::Smf {
                action: "import",
                target: rel.clone(),
                err: Box::new(err),
            })?;
    }
    env.checkpoint("after-smf");
    // 6. SAPI.
    let adoption = match (&env.sapi, new.image_uuid) {
        (Some(sapi), Some(image)) => Some(
            adopt::adopt(sapi.client, &component.name, instance, sapi.server, image)
                .await
                .map_err(|err| TxnError::Sapi { err })?,
        ),
        _ => None,
    };
    env.checkpoint("after-adopt");
    Ok(adoption)
}

async fn run_hook(
    env: &TxnEnv<'_>,
    hook: Hook,
    pkg: &PackageJson,
    cwd: &Path,
) -> Result<(), TxnError> {
    let ran = hooks::run_hook(hook, pkg, cwd, env.hooks).await;
    if ran.is_ok() {
        // `after-preinstall`, `after-postuninstall`, ...: whether or not
        // the package has the hook, the step is over.
        env.checkpoint(&format!("after-{}", hook.as_str()));
    }
    match ran {
        Ok(Some(out)) => {
            tracing::debug!(package = %pkg.name, hook = hook.as_str(), stdout = %out.stdout.trim(), stderr = %out.stderr.trim(), "hook done");
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(err) => Err(TxnError::Hook {
            hook,
            package: pkg.name.clone(),
            err: Box::new(err),
        }),
    }
}

/// Old package: uninstall hooks, unlink its links, move its tree aside.
async fn remove_old(env: &TxnEnv<'_>, old: &Footprint, txn_dir: &Path) -> Result<(), TxnError> {
    let paths = env.paths;
    let tree = old
        .tree
        .as_ref()
        .map(|t| paths.at(t))
        .filter(|t| t.is_dir());
    if old.apm
        && let Some(dir) = &tree
    {
        let pkg = PackageJson::read(dir)
            .map_err(|err| TxnError::Package {
                package: paths.rel(dir),
                err,
            })?
            .unwrap_or_default();
        if !pkg.name.is_empty() {
            run_hook(env, Hook::Preuninstall, &pkg, dir).await?;
            run_hook(env, Hook::Postuninstall, &pkg, dir).await?;
        }
    }
    env.checkpoint("after-old-hooks");
    for link in &old.links {
        unlink_owned(paths, link).map_err(fs_err("swap", "unlink", &paths.at(&link.path)))?;
    }
    if let Some(dir) = tree {
        let dst = txn_dir.join("old/tree");
        fsutil::rename_into(&dir, &dst).map_err(fs_err(
            "swap",
            "move the old version out of",
            &dir,
        ))?;
    }
    Ok(())
}

/// Move every existing file of the old and new overlays into `<txn>/old/root`.
fn move_overlay_out(
    paths: &GzPaths,
    new: Option<&Footprint>,
    txn_dir: &Path,
    old: Option<&Footprint>,
) -> Result<(), TxnError> {
    for rel in kinds::overlay_union(old, new) {
        let src = paths.at(&rel);
        if fsutil::exists(&src) && !src.is_dir() {
            let dst = txn_dir.join("old/root").join(&rel);
            fsutil::rename_into(&src, &dst).map_err(fs_err("swap", "move aside", &src))?;
        }
    }
    Ok(())
}

/// Create or replace a link we own; refuse to clobber anything else.
fn make_link(paths: &GzPaths, link: &Link) -> Result<(), TxnError> {
    let path = paths.at(&link.path);
    match fs::symlink_metadata(&path) {
        Ok(md) if md.file_type().is_symlink() => {
            fs::remove_file(&path).map_err(fs_err("swap", "replace the link", &path))?;
        }
        Ok(_) => return Err(TxnError::LinkConflict { path }),
        Err(_) => {}
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(fs_err("swap", "create", parent))?;
    }
    std::os::unix::fs::symlink(&link.target, &path).map_err(fs_err("swap", "link", &path))
}

/// Remove a link if it still points where we put it.
fn unlink_owned(paths: &GzPaths, link: &Link) -> io::Result<()> {
    let path = paths.at(&link.path);
    match fs::read_link(&path) {
        Ok(t) if t == Path::new(&link.target) => fs::remove_file(&path),
        _ => Ok(()),
    }
}

/// A manifest template of an installed apm tree, the manifest it renders
/// to (root-relative), and that file's content before the postinstall ran
/// (to tell whether the postinstall rendered it).
struct RenderInput {
    template: PathBuf,
    output: String,
    before: Option<(Vec<u8>, Option<std::time::SystemTime>)>,
}

/// Content and mtime of a file, if it exists.
fn file_state(path: &Path) -> Option<(Vec<u8>, Option<std::time::SystemTime>)> {
    let data = fs::read(path).ok()?;
    let mtime = fs::metadata(path).and_then(|m| m.modified()).ok();
    Some((data, mtime))
}

fn render_inputs(paths: &GzPaths, installed: &Path) -> Result<Vec<RenderInput>, TxnError> {
    let list = kinds::template_outputs(installed).map_err(fs_err(
        "smf",
        "list manifests of",
        installed,
    ))?;
    Ok(list
        .into_iter()
        .map(|(template, output)| {
            let before = file_state(&paths.at(&output));
            RenderInput {
                template,
                output,
                before,
            }
        })
        .collect())
}

/// Render the manifests the postinstall did not write (apm's `subfile`).
fn render_manifests(
    env: &TxnEnv<'_>,
    pkg: &PackageJson,
    installed: &Path,
    outputs: &[RenderInput],
) -> Result<(), TxnError> {
    for RenderInput {
        template,
        output,
        before,
    } in outputs
    {
        let out = env.paths.at(output);
        // Written (even with the same content) by the postinstall: leave it,
        // the agent knows its own tokens (cn-agent-update is disabled).
        let now = file_state(&out);
        let written_by_hook = now.is_some() && now != *before;
        if written_by_hook {
            continue;
        }
        let text = fs::read_to_string(template).map_err(fs_err("smf", "read", template))?;
        let rendered = kinds::render_template(&text, &env.hooks.prefix, &pkg.version, installed);
        fsutil::write_atomic(&out, rendered.as_bytes()).map_err(fs_err("smf", "write", &out))?;
    }
    Ok(())
}

/// Remove a component. `old` is what is installed.
pub async fn remove(
    env: &TxnEnv<'_>,
    component: &Component,
    txn_dir: &Path,
    old: Footprint,
) -> Result<TxnOutcome, TxnFailure> {
    let before = |error| TxnFailure {
        error,
        rollback_errors: Vec::new(),
        rolled_back: false,
    };
    let instance_file = kinds::instance_rel(component);
    let instance = fsutil::read_trimmed(&env.paths.at(&instance_file))
        .ok()
        .flatten()
        .and_then(|s| s.parse::<InstanceUuid>().ok());
    fs::create_dir_all(txn_dir).map_err(|e| before(fs_err("swap", "create", txn_dir)(e)))?;
    let smf = snapshot_smf(env, component, txn_dir, Some(&old), None, &[]).map_err(before)?;
    let journal = Journal {
        version: 1,
        txn: txn_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        op: Op::Remove,
        component: component.name.clone(),
        phase: Phase::Swapping,
        created_dirs: Vec::new(),
        old: Some(old),
        new: None,
        instance_file,
        instance,
        instance_created: false,
        smf,
    };
    write_journal(env, &journal).map_err(before)?;
    env.checkpoint("after-journal");
    let result = remove_steps(env, component, &journal, txn_dir).await;
    match result {
        Ok(()) => {
            let mut journal = journal;
            journal.phase = Phase::Committing;
            if let Err(error) = write_journal(env, &journal) {
                let rollback_errors = rollback(env, &journal);
                return Err(TxnFailure {
                    error,
                    rollback_errors,
                    rolled_back: true,
                });
            }
            env.checkpoint("committing");
            commit(env, &journal);
            Ok(TxnOutcome {
                instance,
                adoption: None,
            })
        }
        Err(error) => {
            let rollback_errors = rollback(env, &journal);
            Err(TxnFailure {
                error,
                rollback_errors,
                rolled_back: true,
            })
        }
    }
}

async fn remove_steps(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &Journal,
    txn_dir: &Path,
) -> Result<(), TxnError> {
    let paths = env.paths;
    let old = journal.old.as_ref().expect("removal has an old version");
    remove_old(env, old, txn_dir).await?;
    move_overlay_out(paths, None, txn_dir, Some(old))?;
    env.checkpoint("after-move-old");
    let inst = paths.at(&journal.instance_file);
    if fsutil::exists(&inst) {
        let dst = txn_dir.join("old/instance");
        fsutil::rename_into(&inst, &dst).map_err(fs_err("swap", "move aside", &inst))?;
    }
    for fmri in journal.smf.services.keys() {
        env.platform.smf_delete(fmri).map_err(|err| TxnError::Smf {
            action: "delete",
            target: fmri.clone(),
            err: Box::new(err),
        })?;
    }
    for rel in &old.smf_manifests {
        let p = paths.at(rel);
        if p.is_file() {
            fs::remove_file(&p).map_err(fs_err("smf", "remove", &p))?;
        }
    }
    env.checkpoint("after-smf");
    if let (Some(sapi), Some(instance)) = (&env.sapi, journal.instance) {
        adopt::forget(sapi.client, &component.name, instance)
            .await
            .map_err(|err| TxnError::SapiRemove { err })?;
    }
    env.checkpoint("after-adopt");
    Ok(())
}

fn txn_dir_of(env: &TxnEnv<'_>, journal: &Journal) -> PathBuf {
    env.paths.staging_dir().join(&journal.txn)
}

/// Finish a transaction whose changes all succeeded. Idempotent: a commit
/// interrupted at any point is finished by calling it again.
pub fn commit(env: &TxnEnv<'_>, journal: &Journal) {
    let txn_dir = txn_dir_of(env, journal);
    let old_dir = txn_dir.join("old");
    let previous = env.paths.previous_dir().join(&journal.component);
    let keep = journal.op != Op::Remove && journal.old.is_some();
    if old_dir.exists() {
        if keep {
            if let Some(old) = &journal.old {
                let text = serde_json::to_vec_pretty(old).unwrap_or_default();
                if let Err(e) = fs::write(old_dir.join("footprint.json"), text) {
                    tracing::warn!(component = %journal.component, error = %e, "cannot record the previous version; gz rollback will not be possible");
                }
            }
            discard(env, &previous);
            if let Err(e) = fsutil::rename_into(&old_dir, &previous) {
                tracing::warn!(component = %journal.component, error = %e, "cannot keep the previous version; gz rollback will not be possible");
            }
            env.checkpoint("after-previous");
        } else {
            discard(env, &previous);
        }
    } else if !keep {
        discard(env, &previous);
    }
    discard(env, &txn_dir);
    let jpath = env.paths.journal_file(&journal.component);
    if let Err(e) = fs::remove_file(&jpath)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %jpath.display(), error = %e, "cannot remove the journal");
    }
    let _ = fsutil::fsync_dir(&env.paths.journal_dir());
    env.platform.refresh_sysinfo();
}

/// Remove a tree, moving it into `trash/` first so a kill mid-removal never
/// leaves a half tree where something reads it.
fn discard(env: &TxnEnv<'_>, path: &Path) {
    if !fsutil::exists(path) {
        return;
    }
    let trash = env
        .paths
        .trash_dir()
        .join(format!("{:08x}", rand::random::<u32>()));
    let target = match fsutil::rename_into(path, &trash) {
        Ok(()) => trash,
        Err(_) => path.to_path_buf(),
    };
    if let Err(e) = fsutil::remove_any(&target) {
        tracing::warn!(path = %target.display(), error = %e, "cannot remove");
    }
}

/// Undo a transaction in `swapping` phase. Every step is tried; failures are
/// returned as messages.
pub fn rollback(env: &TxnEnv<'_>, journal: &Journal) -> Vec<String> {
    let paths = env.paths;
    let txn_dir = txn_dir_of(env, journal);
    let mut errors = Vec::new();
    // New links and files go.
    if let Some(new) = &journal.new {
        for link in &new.links {
            note(
                &mut errors,
                format!("unlink {}", link.path),
                unlink_owned(paths, link),
            );
        }
        if let Some(tree) = &new.tree {
            let dest = paths.at(tree);
            let staged_still_there = txn_dir.join("new").exists()
                && fs::read_dir(txn_dir.join("new"))
                    .map(|mut d| d.next().is_some())
                    .unwrap_or(false);
            let old_moved = txn_dir.join("old/tree").exists();
            let old_had_tree = journal
                .old
                .as_ref()
                .and_then(|o| o.tree.as_ref())
                .map(|t| t == tree)
                .unwrap_or(false);
            // The tree at `dest` is the new one when the staged copy has
            // moved and the old one is aside (or there was none).
            if fsutil::exists(&dest) && !staged_still_there && (old_moved || !old_had_tree) {
                note(
                    &mut errors,
                    format!("remove new {tree}"),
                    fsutil::remove_any(&dest),
                );
            }
        }
        for rel in &new.overlay {
            let placed = !fsutil::exists(&txn_dir.join("root").join(rel));
            let dest = paths.at(rel);
            if placed && fsutil::exists(&dest) && !dest.is_dir() {
                note(
                    &mut errors,
                    format!("remove new {rel}"),
                    fs::remove_file(&dest),
                );
            }
        }
    }
    // The old tree and files come back.
    if let Some(old) = &journal.old {
        let aside = txn_dir.join("old/tree");
        if let (Some(tree), true) = (&old.tree, aside.exists()) {
            let dest = paths.at(tree);
            if fsutil::exists(&dest) {
                note(
                    &mut errors,
                    format!("clear {tree}"),
                    fsutil::remove_any(&dest),
                );
            }
            note(
                &mut errors,
                format!("restore {tree}"),
                fsutil::rename_into(&aside, &dest),
            );
        }
    }
    let aside_root = txn_dir.join("old/root");
    if aside_root.exists() {
        match kinds::overlay_files(&aside_root) {
            Ok(files) => {
                for rel in files {
                    let dest = paths.at(&rel);
                    if fsutil::exists(&dest) && !dest.is_dir() {
                        let _ = fs::remove_file(&dest);
                    }
                    note(
                        &mut errors,
                        format!("restore {rel}"),
                        fsutil::rename_into(&aside_root.join(&rel), &dest),
                    );
                }
            }
            Err(e) => errors.push(format!("list {}: {e}", aside_root.display())),
        }
    }
    if let Some(old) = &journal.old {
        for link in &old.links {
            let r = make_link(paths, link).map_err(|e| io::Error::other(e.to_string()));
            note(&mut errors, format!("relink {}", link.path), r);
        }
    }
    // The instance UUID file.
    let inst = paths.at(&journal.instance_file);
    if journal.instance_created {
        note(
            &mut errors,
            "remove the new instance UUID file".into(),
            fsutil::remove_any(&inst),
        );
    }
    let inst_aside = txn_dir.join("old/instance");
    if inst_aside.exists() {
        note(
            &mut errors,
            "restore the instance UUID file".into(),
            fsutil::rename_into(&inst_aside, &inst),
        );
    }
    // SMF.
    errors.extend(restore_smf(env, journal, &txn_dir));
    // Directories this transaction created, deepest first, when empty.
    for d in journal.created_dirs.iter().rev() {
        let _ = fs::remove_dir(paths.at(d));
    }
    discard(env, &txn_dir);
    let jpath = paths.journal_file(&journal.component);
    if let Err(e) = fs::remove_file(&jpath)
        && e.kind() != io::ErrorKind::NotFound
    {
        errors.push(format!("remove the journal {}: {e}", jpath.display()));
    }
    let _ = fsutil::fsync_dir(&paths.journal_dir());
    for e in &errors {
        tracing::error!(component = %journal.component, error = %e, "rollback step failed");
    }
    errors
}

fn note(errors: &mut Vec<String>, what: String, r: io::Result<()>) {
    if let Err(e) = r {
        errors.push(format!("{what}: {e}"));
    }
}

/// Put SMF back as the snapshot recorded it.
fn restore_smf(env: &TxnEnv<'_>, journal: &Journal, txn_dir: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    let p = env.platform;
    // Services that did not exist before go.
    for (fmri, state) in &journal.smf.services {
        if state.is_none() {
            match p.smf_state(fmri) {
                Ok(Some(_)) => {
                    if let Err(e) = p.smf_delete(fmri) {
                        errors.push(format!("delete {fmri}: {}", crate::error::error_chain(&e)));
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(format!(
                    "state of {fmri}: {}",
                    crate::error::error_chain(&e)
                )),
            }
        }
    }
    for rel in &journal.smf.absent {
        let path = env.paths.at(rel);
        if path.is_file()
            && let Err(e) = fs::remove_file(&path)
        {
            errors.push(format!("remove {rel}: {e}"));
        }
    }
    // The old manifests come back and are imported again.
    for rel in &journal.smf.backed_up {
        let saved = txn_dir.join("old/smf").join(rel);
        let dest = env.paths.at(rel);
        let copied = (|| {
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::copy(&saved, &dest).map(|_| ())
        })();
        if let Err(e) = copied {
            errors.push(format!("restore {rel}: {e}"));
            continue;
        }
        if let Err(e) = p.smf_import(&dest) {
            errors.push(format!("import {rel}: {}", crate::error::error_chain(&e)));
        }
    }
    // Each instance enabled or disabled as it was.
    for (fmri, state) in &journal.smf.services {
        let Some(want) = state else { continue };
        match p.smf_state(fmri) {
            Ok(Some(now)) => {
                // An instance that stayed enabled may still run the new
                // version's code (from a tree that is gone): restart it.
                let r = if want.is_enabled() && !now.is_enabled() {
                    p.smf_enable(fmri)
                } else if !want.is_enabled() && now.is_enabled() {
                    p.smf_disable(fmri)
                } else if want.is_enabled() {
                    p.smf_restart(fmri)
                } else {
                    Ok(())
                };
                if let Err(e) = r {
                    errors.push(format!(
                        "restore state of {fmri}: {}",
                        crate::error::error_chain(&e)
                    ));
                }
            }
            Ok(None) => errors.push(format!(
                "{fmri} was {want} before and is gone; import its manifest by hand"
            )),
            Err(e) => errors.push(format!(
                "state of {fmri}: {}",
                crate::error::error_chain(&e)
            )),
        }
    }
    errors
}

/// What recovery did with one journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub component: String,
    pub op: Op,
    /// `true`: the interrupted transaction was finished; `false`: undone.
    pub finished: bool,
    pub errors: Vec<String>,
}

/// Finish or undo every transaction a previous run left behind, then clear
/// leftover staging directories, partial downloads and trash. Runs under the
/// server lock before anything else.
pub fn recover(env: &TxnEnv<'_>) -> Result<Vec<Recovered>, RecoverError> {
    let mut out = Vec::new();
    let jdir = env.paths.journal_dir();
    let entries = match fs::read_dir(&jdir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .collect::<Vec<_>>(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(RecoverError { path: jdir, err }),
    };
    let mut journals: Vec<PathBuf> = entries
        .into_iter()
        .filter(|p| p.extension().map(|e| e == "json").unwrap_or(false))
        .collect();
    journals.sort();
    for path in journals {
        let journal = read_journal(&path).map_err(|err| RecoverError {
            path: path.clone(),
            err,
        })?;
        let finished = journal.phase == Phase::Committing;
        let errors = if finished {
            commit(env, &journal);
            Vec::new()
        } else {
            rollback(env, &journal)
        };
        tracing::warn!(component = %journal.component, finished, "recovered an interrupted transaction");
        out.push(Recovered {
            component: journal.component.clone(),
            op: journal.op,
            finished,
            errors,
        });
    }
    // Leftovers of runs that died before writing a journal.
    for dir in [env.paths.staging_dir(), env.paths.trash_dir()] {
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                let _ = fsutil::remove_any(&e.path());
            }
        }
    }
    if let Ok(rd) = fs::read_dir(env.paths.downloads_dir()) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".partial") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    Ok(out)
}

/// A journal that cannot be read: nothing is touched until someone looks.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot read the transaction journal {path}; inspect it (and the staging directory next to it) and remove it"
)]
pub struct RecoverError {
    pub path: PathBuf,
    #[source]
    pub err: io::Error,
}
