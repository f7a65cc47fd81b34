//! The swap of one component as a transaction with a journal.
//!
//! An install or upgrade, once the new version is staged and verified:
//! 1. plan: snapshot the component's SMF services (state of every instance
//!    its old and new manifests define, plus the catalog's) and copy its
//!    manifest files aside; choose the instance UUID (kept, or new);
//! 2. write the journal (`journal/<component>.json`, fsynced) — from here on
//!    any failure, or a kill and the next run's recovery, rolls back;
//! 3. old package: `preuninstall`, `postuninstall` (cwd = installed dir),
//!    unlink its links, move its tree and overlay files into
//!    `<state>/aside/<txn>` (not under `staging/`, where the new package's
//!    preinstall runs: a hook that deletes its transaction directory or all
//!    of `staging/` cannot take the previous version with it);
//! 4. new package: `preinstall` (cwd = the staged copy), rename the staged
//!    tree into place and lay the overlay files, create links (apm bins are
//!    chmod 0755 and linked relative, as apm does), `postinstall` (cwd =
//!    installed dir), which must have written the manifest of each of its
//!    `smf/manifests/*.xml.in` into `opt/smartdc/agents/smf` (agentsadm
//!    never renders a package's templates: a manifest the postinstall did
//!    not write fails the install); what else it wrote there is journaled,
//!    kept as the component's own when named after it, refused otherwise
//!    (`manifests`);
//! 5. SMF: every manifest of the new version is checked (a regular file
//!    declaring only the component's services) and imported through the
//!    [`Platform`];
//! 6. the health gate, when the run has one ([`super::health`]): the
//!    instances that should run must come online and stay online, else the
//!    step fails as `unhealthy` and everything is rolled back; then SAPI
//!    adoption (unless `--no-sapi`), so SAPI never records a build that
//!    did not come up;
//! 7. the journal moves to `committing`; the old version becomes
//!    `previous/<component>` (for `gz rollback`, in the layout's
//!    [`KeptForm`]; one that cannot be kept, the filesystem full, is a
//!    warning in the result and in `gz report`), the staging directory and
//!    the journal are removed. A
//!    commit interrupted midway is finished by the next run.
//!
//! Every layout ([`super::layout`]) runs this same transaction; a layout
//! without services (mockcloud) simply has no hooks, links or manifests to
//! handle and takes no SMF snapshot. An instance UUID file that lives inside
//! the component's tree (mockcloud's `agents/<pkg>/instance_uuid`) is
//! written into the staged tree, kept or new, and moves with it.
//!
//! The file work (copies, tree walks, renames, fsyncs) runs on the blocking
//! pool in a few chunks between the awaited steps (hooks, SMF, SAPI); the
//! test checkpoints run on the task itself, so a `wait:` checkpoint stops
//! the run as it did when everything ran inline.
//!
//! Modules: `swap` (steps 3-6 and the removal steps), `manifests` (what a
//! postinstall writes into apm's SMF directory), `commit` (the end of
//! every transaction), `undo` (rollback), `recover` (journals a killed run
//! left behind).
//!
//! Each hook runs contained ([`super::hooks::contain`]: whatever it starts
//! ends with it), journaled as it starts ([`Journal::hook_groups`]).
//! Rollback (a failed step, or recovery of a `swapping` journal) first
//! ends whatever is left of those hooks (a hook orphaned by a kill of the
//! installer, and every process it started, would go on writing into the
//! tree being restored), then undoes in reverse and keeps going past
//! errors, reporting them: new links and files
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
//! `after-health`, `after-adopt`, `committing`, `after-previous`.

mod commit;
mod journal;
mod manifests;
mod recover;
mod swap;
mod undo;

pub use commit::commit;
pub use journal::{Change, InstallOp, Journal, JournalError};
pub use recover::{RecoverError, Recovered, recover};
pub use undo::rollback;

use agentsadm_types::component::ComponentName;
use commit::{discard, finish};

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use agentsadm_api::SapiClient;
use agentsadm_platform as platform;
use agentsadm_platform::Platform;
use agentsadm_platform::PlatformError;
use agentsadm_platform::ServiceState;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;

use super::adopt::AdoptError;

use super::adopt::Adoption;
use super::fsutil;
use super::hooks::HookEnv;
use super::hooks::HookError;
use super::kinds;
use super::kinds::Footprint;
use super::kinds::StagedVersion;
use super::layout::Layout;
use super::package::Hook;
use super::package::PackageError;
use super::paths::AGENTS_PREFIX;
use super::paths::GzPaths;
use super::step::Step;

/// What a transaction does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Install,
    Remove,
    /// `gz rollback`: install the kept previous version.
    Rollback,
}

impl Op {
    /// The noun for notes (`a removal interrupted in an earlier run`).
    pub fn noun(&self) -> &'static str {
        match self {
            Op::Install => "install",
            Op::Remove => "removal",
            Op::Rollback => "rollback",
        }
    }
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
    /// Manifest files that existed, copied to `<aside>/smf/<rel>`.
    pub backed_up: Vec<String>,
    /// Manifest files that did not exist (removed on rollback).
    pub absent: Vec<String>,
    /// apm: the manifests in apm's SMF directory just before the
    /// postinstall ran; a rollback removes the new ones that are not
    /// another component's (what a postinstall killed with the installer
    /// wrote, which the journal could not list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir_before: Option<Vec<String>>,
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
    /// Where everything lives, and whether hooks and SMF run.
    pub layout: &'a dyn Layout,
    pub platform: &'a dyn Platform,
    pub hooks: &'a HookEnv,
    /// `AGENTSADM_TEST_CRASH_AT`.
    pub crash_at: Option<&'a str>,
    /// `AGENTSADM_TEST_NO_SPACE_AT`: the step that fails with `ENOSPC`.
    pub no_space_at: Option<&'a str>,
    /// `None` with `--no-sapi`.
    pub sapi: Option<SapiTarget<'a>>,
    /// Whose SMF services are whose ([`kinds::claims`]): a transaction
    /// snapshots, restores and deletes only its component's own.
    pub catalog: &'a agentsadm_types::catalog::Catalog,
    /// The health gate after an install's SMF import (`None`: no gate).
    pub gate: Option<&'a super::health::HealthGate>,
    /// What the other installed components claim (checked again right
    /// before each SMF import; `None`: the namespace alone is checked).
    pub others: Option<&'a BTreeMap<String, kinds::claims::Claims>>,
    /// The components installing at the same time in this run: a manifest
    /// named after one of them that appears during this transaction's
    /// postinstall is that transaction's to check.
    pub concurrent: &'a [String],
}

impl TxnEnv<'_> {
    pub fn paths(&self) -> &GzPaths {
        self.layout.paths()
    }

    /// Abort (or wait to be killed) at a named point, for crash tests.
    pub fn checkpoint(&self, name: &str) {
        super::test_checkpoint(self.crash_at, name);
    }

    /// Whether a test asked the step `name` to fail as a full filesystem
    /// would.
    pub fn no_space_at(&self, name: &str) -> bool {
        self.no_space_at == Some(name)
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
        step: Step,
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
    /// An apm package's postinstall did not write a manifest its
    /// template stands for (agentsadm never renders one itself).
    #[error(
        "{component}: SMF manifest {manifest} was {} by the package's postinstall, which should have rendered it from {template} (agentsadm never renders a package's templates); fix the package's postinstall, or install a build whose postinstall writes it",
        if *stale { "left unchanged" } else { "not written" }
    )]
    ManifestNotWritten {
        component: String,
        manifest: PathBuf,
        template: String,
        /// The file existed and the postinstall left it as it was.
        stale: bool,
    },
    /// A manifest the postinstall wrote that is not the component's to
    /// write or to import.
    #[error("{component}: an SMF manifest was refused")]
    ManifestRefused {
        component: String,
        manifest: String,
        #[source]
        err: Box<kinds::claims::ClaimError>,
    },
    #[error("the new version of {component} is unhealthy")]
    Unhealthy {
        component: String,
        #[source]
        err: super::health::GateError,
    },
}

impl TxnError {
    pub fn step(&self) -> Step {
        match self {
            TxnError::Hook { hook, .. } => Step::Hook((*hook).into()),
            TxnError::Fs { step, .. } => step.clone(),
            TxnError::Smf { .. } => Step::Smf,
            TxnError::Sapi { .. } | TxnError::SapiRemove { .. } => Step::Sapi,
            TxnError::InstanceCorrupt { .. } => Step::Instance,
            TxnError::LinkConflict { .. } | TxnError::Package { .. } => Step::Swap,
            TxnError::Journal { .. } => Step::Journal,
            TxnError::Unhealthy { .. } => Step::Unhealthy,
            TxnError::ManifestNotWritten { .. } | TxnError::ManifestRefused { .. } => {
                Step::Hook(Hook::Postinstall.into())
            }
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

impl TxnFailure {
    /// A failure before the journal was written: nothing changed.
    fn before(error: TxnError) -> TxnFailure {
        TxnFailure {
            error,
            rollback_errors: Vec::new(),
            rolled_back: false,
        }
    }
}

/// A successful transaction.
#[derive(Clone, Debug)]
pub struct TxnOutcome {
    pub instance: Option<InstanceUuid>,
    pub adoption: Option<Adoption>,
    /// What the result should warn about (the replaced version could not
    /// be kept for `gz rollback`).
    pub notes: Vec<String>,
}

fn fs_err(step: Step, action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> TxnError {
    let path = path.to_path_buf();
    move |err| TxnError::Fs {
        step,
        action,
        path,
        err,
    }
}

/// A fresh transaction directory name.
pub fn new_txn_name(component: &ComponentName) -> String {
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
            step: Step::Instance,
            action: "read the instance UUID file",
            path: path.to_path_buf(),
            err,
        }),
    }
}

/// Take the SMF snapshot and copy the manifest files aside (nothing for a
/// layout without services).
async fn snapshot_smf(
    env: &TxnEnv<'_>,
    component: &Component,
    txn_dir: &Path,
    old: Option<&Footprint>,
    new: Option<&Footprint>,
    staged_templates: Vec<PathBuf>,
) -> Result<SmfSnapshot, TxnError> {
    if !env.layout.runs_services() {
        return Ok(SmfSnapshot::default());
    }
    let mut manifests: BTreeSet<String> = BTreeSet::new();
    for f in [old, new].into_iter().flatten() {
        manifests.extend(f.smf_manifests.iter().cloned());
    }
    let manifests: Vec<String> = manifests.into_iter().collect();
    let fmris = {
        let paths = env.paths().clone();
        let mut fmris: BTreeSet<String> = component.smf_services.iter().cloned().collect();
        let manifests = manifests.clone();
        blocking(move || {
            // Instances of the manifest files that exist; one that exists
            // and cannot be read or parsed fails the transaction (its
            // services could not be snapshotted, so not restored either).
            let files = manifests.iter().map(|rel| paths.at(rel));
            for file in files.chain(staged_templates) {
                match platform::read_manifest_instances(&file) {
                    Ok(list) => fmris.extend(list.into_iter().map(|i| i.fmri)),
                    Err(PlatformError::Read { err, .. })
                        if err.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => {
                        return Err(TxnError::Smf {
                            action: "manifest read",
                            target: file.display().to_string(),
                            err: Box::new(err),
                        });
                    }
                }
            }
            Ok(fmris)
        })
        .await?
    };
    // Only the component's own services: a manifest installed before
    // claims were checked may name another component's or the system's.
    let fmris: BTreeSet<String> = fmris
        .into_iter()
        .filter(|f| {
            component.smf_services.contains(f)
                || kinds::claims::in_namespace(env.catalog, component, f)
        })
        .collect();
    let mut snap = SmfSnapshot::default();
    for fmri in fmris {
        let state = env
            .platform
            .smf_state(&fmri)
            .await
            .map_err(|err| TxnError::Smf {
                action: "state query",
                target: fmri.clone(),
                err: Box::new(err),
            })?;
        snap.services.insert(fmri, state);
    }
    let paths = env.paths().clone();
    let txn_dir = txn_dir.to_path_buf();
    let (backed_up, absent) =
        blocking(move || manifests::back_up(&paths, &txn_dir, manifests)).await?;
    snap.backed_up = backed_up;
    snap.absent = absent;
    Ok(snap)
}

/// Directories (root-relative) that the new version's paths need and that
/// do not exist yet.
/// The directories apm creates under its prefix before anything else:
/// agents' hooks write into them (`smf/` for the rendered manifest, `etc/`,
/// `db/`) and fail, or skip themselves, where they are missing.
pub(super) const APM_PREFIX_DIRS: [&str; 6] =
    ["tmp", "lib/node_modules", "bin", "smf", "etc", "db"];

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
        if f.apm {
            for dir in APM_PREFIX_DIRS {
                // The directory itself too: the parents of a child in it.
                add_parents(&format!("{AGENTS_PREFIX}/{dir}/-"));
            }
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

async fn write_journal(env: &TxnEnv<'_>, journal: &Journal) -> Result<(), TxnError> {
    let path = env.paths().journal_file(&journal.component);
    let mut text = serde_json::to_vec_pretty(journal).unwrap_or_default();
    text.push(b'\n');
    blocking(move || {
        fsutil::write_atomic(&path, &text).map_err(|err| TxnError::Journal { path, err })
    })
    .await
}

/// Read a journal file.
pub fn read_journal(path: &Path) -> io::Result<Journal> {
    let bytes = crate::fsutil::read_small(path)?;
    serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn txn_name(txn_dir: &Path) -> String {
    txn_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Install (or, for [`InstallOp::Rollback`], restore) `staged` in place of
/// `old`. `txn_dir` is `staging/<txn>` holding the staged files.
pub async fn install(
    env: &TxnEnv<'_>,
    component: &Component,
    op: InstallOp,
    txn_dir: &Path,
    staged: &StagedVersion,
    old: Option<Footprint>,
) -> Result<TxnOutcome, TxnFailure> {
    let instance_file = env.layout.instance_rel(component);
    let new = staged.footprint.clone();
    let (instance, instance_created, templates, (created_dirs, keep_off)) = {
        let paths = env.paths().clone();
        let instance_file = instance_file.clone();
        let apm_tree = staged.tree_src.clone().filter(|_| new.apm);
        let new = new.clone();
        let component_name = component.name.clone();
        blocking(move || {
            let (instance, created) = plan_instance(&paths.at(&instance_file))?;
            let templates: Vec<PathBuf> = match apm_tree {
                Some(src) => kinds::template_outputs(&src)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, _)| t)
                    .collect(),
                None => Vec::new(),
            };
            let created_dirs = missing_dirs(&paths, Some(&new), &instance_file);
            let keep_off = super::keep_off::read(&paths, &component_name).is_some();
            Ok((instance, created, templates, (created_dirs, keep_off)))
        })
        .await
        .map_err(TxnFailure::before)?
    };
    let smf = snapshot_smf(env, component, txn_dir, old.as_ref(), Some(&new), templates)
        .await
        .map_err(TxnFailure::before)?;
    let change = match op {
        InstallOp::Install => Change::Install { old, new },
        InstallOp::Rollback => Change::Rollback { old, new },
    };
    let mut journal = Journal {
        version: 1,
        txn: txn_name(txn_dir),
        change,
        component: component.name.clone(),
        phase: Phase::Swapping,
        created_dirs,
        instance_file,
        instance: Some(instance),
        instance_created,
        smf,
        hook_groups: Vec::new(),
        keep_off,
    };
    write_journal(env, &journal)
        .await
        .map_err(TxnFailure::before)?;
    env.checkpoint("after-journal");
    let swapped = swap::swap_in(env, component, &mut journal, txn_dir, staged, instance).await;
    let outcome = swapped.map(|adoption| TxnOutcome {
        instance: Some(instance),
        adoption,
        notes: Vec::new(),
    });
    finish(env, journal, outcome)
        .await
        .map(|(mut outcome, notes)| {
            outcome.notes.extend(notes);
            outcome
        })
}

/// Remove a component. `old` is what is installed.
pub async fn remove(
    env: &TxnEnv<'_>,
    component: &Component,
    txn_dir: &Path,
    old: Footprint,
) -> Result<TxnOutcome, TxnFailure> {
    let instance_file = env.layout.instance_rel(component);
    let instance = {
        let path = env.paths().at(&instance_file);
        let dir = txn_dir.to_path_buf();
        blocking(move || {
            fs::create_dir_all(&dir).map_err(fs_err(Step::Swap, "create", &dir))?;
            Ok(fsutil::read_trimmed(&path)
                .ok()
                .flatten()
                .and_then(|s| s.parse::<InstanceUuid>().ok()))
        })
        .await
        .map_err(TxnFailure::before)?
    };
    let smf = snapshot_smf(env, component, txn_dir, Some(&old), None, Vec::new())
        .await
        .map_err(TxnFailure::before)?;
    let mut journal = Journal {
        version: 1,
        txn: txn_name(txn_dir),
        change: Change::Remove { old: old.clone() },
        component: component.name.clone(),
        phase: Phase::Swapping,
        created_dirs: Vec::new(),
        instance_file,
        instance,
        instance_created: false,
        smf,
        hook_groups: Vec::new(),
        keep_off: false,
    };
    write_journal(env, &journal)
        .await
        .map_err(TxnFailure::before)?;
    env.checkpoint("after-journal");
    let removed = swap::remove_steps(env, component, &mut journal, &old, txn_dir).await;
    let outcome = removed.map(|()| TxnOutcome {
        instance,
        adoption: None,
        notes: Vec::new(),
    });
    finish(env, journal, outcome)
        .await
        .map(|(mut outcome, notes)| {
            outcome.notes.extend(notes);
            outcome
        })
}

/// Where the note that an upgrade could not keep the version it replaced
/// lives (`<state>/not-kept/<component>.json`) until a later transaction
/// of the component commits; `gz report` shows it.
pub fn not_kept_file(paths: &GzPaths, component: &ComponentName) -> PathBuf {
    paths
        .state_dir()
        .join("not-kept")
        .join(format!("{component}.json"))
}

/// The note [`not_kept_file`] holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotKept {
    /// What the result said, in full.
    pub message: String,
}

fn txn_dir_of(paths: &GzPaths, journal: &Journal) -> PathBuf {
    paths.staging_dir().join(&journal.txn)
}

/// Where a transaction keeps the version it moved out (`tree/`, `root/`,
/// `smf/`, `instance`): `<state>/aside/<txn>`, not under the staging
/// directory, so that a hook of the new package that deletes its own
/// staged copy, its transaction directory or all of `staging/` cannot take
/// the previous version with it.
pub fn aside_dir(paths: &GzPaths, txn_dir: &Path) -> PathBuf {
    paths
        .state_dir()
        .join("aside")
        .join(txn_dir.file_name().unwrap_or_default())
}
