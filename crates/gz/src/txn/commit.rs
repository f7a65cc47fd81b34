//! The end of every transaction: the commit (the journal moves to
//! `committing`, the replaced version is kept for `gz rollback` in the
//! layout's [`KeptForm`], the staging directory and the journal go), or,
//! when a step failed, the rollback. A commit interrupted midway is
//! finished by calling [`commit`] again.

use std::fs;
use std::io;
use std::path::Path;

use agentsadm_platform::blocking;

use super::super::fsutil;
use super::super::layout::KeptForm;
use super::super::paths::GzPaths;
use super::Journal;
use super::Op;
use super::Phase;
use super::TxnEnv;
use super::TxnError;
use super::TxnFailure;
use super::rollback;
use super::txn_dir_of;
use super::write_journal;

/// The end of every transaction: when its steps all succeeded, the journal
/// moves to `committing` and the commit runs; otherwise (or when that
/// journal write fails) everything is undone.
pub(super) async fn finish<T>(
    env: &TxnEnv<'_>,
    mut journal: Journal,
    steps: Result<T, TxnError>,
) -> Result<T, TxnFailure> {
    let error = match steps {
        Ok(value) => {
            journal.phase = Phase::Committing;
            match write_journal(env, &journal).await {
                Ok(()) => {
                    env.checkpoint("committing");
                    commit(env, &journal).await;
                    return Ok(value);
                }
                Err(error) => error,
            }
        }
        Err(error) => {
            tracing::warn!(component = %journal.component, error = %agentsadm_types::error::error_chain(&error), "rolling back");
            error
        }
    };
    let rollback_errors = rollback(env, &journal).await;
    Err(TxnFailure {
        error,
        rollback_errors,
        rolled_back: true,
    })
}

/// Finish a transaction whose changes all succeeded. Idempotent: a commit
/// interrupted at any point is finished by calling it again.
pub async fn commit(env: &TxnEnv<'_>, journal: &Journal) {
    let form = env.layout.kept_form();
    let paths = env.paths().clone();
    let j = journal.clone();
    if blocking(move || keep_previous(&paths, &j, form)).await {
        env.checkpoint("after-previous");
    }
    let paths = env.paths().clone();
    let j = journal.clone();
    blocking(move || {
        let txn_dir = txn_dir_of(&paths, &j);
        discard(&paths, &super::aside_dir(&paths, &txn_dir));
        discard(&paths, &txn_dir);
        // A successful transaction repairs what an incomplete rollback
        // left.
        let _ = fs::remove_file(paths.broken_file(&j.component));
        let jpath = paths.journal_file(&j.component);
        if let Err(e) = fs::remove_file(&jpath)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %jpath.display(), error = %e, "cannot remove the journal");
        }
        let _ = fsutil::fsync_dir(&paths.journal_dir());
    })
    .await;
    env.platform.refresh_sysinfo().await;
}

/// Make the replaced version `previous/<component>` (an upgrade), or drop
/// the kept one (a removal). Returns whether a version was kept just now.
fn keep_previous(paths: &GzPaths, journal: &Journal, form: KeptForm) -> bool {
    let old_dir = super::aside_dir(paths, &txn_dir_of(paths, journal));
    let previous = paths.previous_dir().join(&journal.component);
    let keep = journal.op != Op::Remove && journal.old.is_some();
    if !keep {
        discard(paths, &previous);
        return false;
    }
    let cannot_keep = |e: io::Error| {
        tracing::warn!(component = %journal.component, error = %e, "cannot keep the previous version; gz rollback will not be possible");
    };
    match form {
        KeptForm::Whole => {
            if !old_dir.exists() {
                return false;
            }
            if let Some(old) = &journal.old {
                let text = serde_json::to_vec_pretty(old).unwrap_or_default();
                if let Err(e) = fs::write(old_dir.join("footprint.json"), text) {
                    tracing::warn!(component = %journal.component, error = %e, "cannot record the previous version; gz rollback will not be possible");
                }
            }
            discard(paths, &previous);
            if let Err(e) = fsutil::rename_into(&old_dir, &previous) {
                cannot_keep(e);
            }
        }
        KeptForm::TreeOnly => {
            // Checked on the tree, not `old/`: a commit finished again after
            // the tree moved must not discard what it kept.
            let tree = old_dir.join("tree");
            if !fsutil::exists(&tree) {
                return false;
            }
            discard(paths, &previous);
            if let Err(e) = fsutil::rename_into(&tree, &previous) {
                cannot_keep(e);
            }
        }
    }
    true
}

/// Remove a tree, moving it into `trash/` first so a kill mid-removal never
/// leaves a half tree where something reads it. Blocking.
pub(super) fn discard(paths: &GzPaths, path: &Path) {
    if !fsutil::exists(path) {
        return;
    }
    let trash = paths
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
