//! The end of every transaction: the commit (the journal moves to
//! `committing`, the replaced version is kept for `gz rollback` in the
//! layout's [`KeptForm`], the staging directory and the journal go), or,
//! when a step failed, the rollback. A commit interrupted midway is
//! finished by calling [`commit`] again.

use agentsadm_types::component::ComponentName;
use std::fs;
use std::io;
use std::path::Path;

use agentsadm_platform::blocking;

use super::super::fsutil;
use super::super::layout::KeptForm;
use super::super::paths::GzPaths;
use super::Change;
use super::Journal;
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
) -> Result<(T, Vec<String>), TxnFailure> {
    let error = match steps {
        Ok(value) => {
            journal.phase = Phase::Committing;
            match write_journal(env, &journal).await {
                Ok(()) => {
                    env.checkpoint("committing");
                    let notes = commit(env, &journal).await.into_iter().collect();
                    return Ok((value, notes));
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
/// interrupted at any point is finished by calling it again. Returns what
/// the result must warn about: an upgrade whose replaced version could not
/// be kept (the filesystem full, out of inodes) is installed, but `gz
/// rollback` is not possible; that also stays in `<state>/not-kept` for
/// `gz report` until a later transaction of the component commits.
pub async fn commit(env: &TxnEnv<'_>, journal: &Journal) -> Option<String> {
    let form = env.layout.kept_form();
    let paths = env.paths().clone();
    let j = journal.clone();
    let no_space = env.no_space_at("keep-previous");
    let kept = blocking(move || keep_previous(&paths, &j, form, no_space)).await;
    if kept.as_ref().is_ok_and(|k| *k) {
        env.checkpoint("after-previous");
    }
    let not_kept = kept.err().map(|err| {
        let old = journal.change.old().map(|o| o.version.as_str()).unwrap_or("");
        format!(
            "{c}: the version it replaced ({old}) could not be kept ({err}): {c} is installed, but `agentsadm gz rollback {c}` is not possible until a later upgrade keeps one; free space and inodes in {}",
            env.paths().state_dir().display(),
            c = journal.component,
        )
    });
    if let Some(note) = &not_kept {
        tracing::warn!(component = %journal.component, "{note}");
    }
    let paths = env.paths().clone();
    let j = journal.clone();
    let note = not_kept.clone();
    blocking(move || {
        let txn_dir = txn_dir_of(&paths, &j);
        // First what frees space: the copy that was not kept.
        discard(&paths, &super::aside_dir(&paths, &txn_dir));
        discard(&paths, &txn_dir);
        record_not_kept(&paths, &j.component, note);
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
    not_kept
}

/// Write (or, with `None`, clear) the note that `component`'s replaced
/// version was not kept. Blocking.
fn record_not_kept(paths: &GzPaths, component: &ComponentName, note: Option<String>) {
    let file = super::not_kept_file(paths, component);
    match note {
        Some(message) => {
            let text = serde_json::to_vec_pretty(&super::NotKept { message }).unwrap_or_default();
            if let Err(e) = fsutil::write_atomic(&file, &text) {
                tracing::warn!(path = %file.display(), error = %e, "cannot record that the previous version was not kept");
            }
        }
        None => {
            let _ = fs::remove_file(&file);
        }
    }
}

/// Make the replaced version `previous/<component>` (an upgrade), or drop
/// the kept one (a removal). Returns whether a version was kept just now;
/// an error when one should have been and could not (the version kept
/// before is gone then too: `gz rollback` must never restore an older
/// version than the one replaced). `no_space` injects `ENOSPC` (tests).
fn keep_previous(
    paths: &GzPaths,
    journal: &Journal,
    form: KeptForm,
    no_space: bool,
) -> io::Result<bool> {
    let old_dir = super::aside_dir(paths, &txn_dir_of(paths, journal));
    let previous = paths.previous_dir().join(&journal.component);
    let keep = !matches!(journal.change, Change::Remove { .. }) && journal.change.old().is_some();
    if !keep {
        discard(paths, &previous);
        return Ok(false);
    }
    // Checked on the tree for TreeOnly, not `old/`: a commit finished
    // again after the tree moved must not discard what it kept.
    let source = match form {
        KeptForm::Whole => old_dir.clone(),
        KeptForm::TreeOnly => old_dir.join("tree"),
    };
    if !fsutil::exists(&source) {
        return Ok(false);
    }
    // The version kept before goes first (it also frees space).
    discard(paths, &previous);
    if no_space {
        return Err(io::Error::from_raw_os_error(libc::ENOSPC));
    }
    if let (KeptForm::Whole, Some(old)) = (form, journal.change.old()) {
        let text = serde_json::to_vec_pretty(old).unwrap_or_default();
        fs::write(old_dir.join("footprint.json"), text)?;
    }
    fsutil::rename_into(&source, &previous)?;
    Ok(true)
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
