//! Undo a transaction in `swapping` phase (a failed step, or recovery of a
//! journal a killed run left). Every step is tried; failures are returned
//! as messages. Files first (on the blocking pool), then SMF, then the
//! directories the transaction created, the staging directory and the
//! journal.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agentsadm_platform::blocking;
use agentsadm_types::catalog::Catalog;

use super::super::fsutil;
use super::super::kinds;
use super::super::paths::GzPaths;
use super::Journal;
use super::TxnEnv;
use super::aside_dir;
use super::discard;
use super::swap::make_link;
use super::swap::unlink_owned;
use super::txn_dir_of;

/// Undo `journal`; returns what could not be undone.
pub async fn rollback(env: &TxnEnv<'_>, journal: &Journal) -> Vec<String> {
    // First whatever the hooks left running: an orphaned hook, or what it
    // started, would go on writing into the tree being restored.
    let groups = journal.hook_groups.clone();
    let killed = blocking(move || {
        groups
            .iter()
            .map(super::super::hooks::end_left)
            .sum::<usize>()
    })
    .await;
    if killed > 0 {
        tracing::warn!(component = %journal.component, killed, "killed what the hooks left running");
    }
    let paths = env.paths().clone();
    let j = journal.clone();
    let mut errors = blocking(move || undo_files(&paths, &j)).await;
    errors.extend(restore_smf(env, journal).await);
    if journal.keep_off && env.layout.runs_services() {
        // Restored "as it was" may still be a state someone enabled by
        // hand; the component is disabled here, so it ends disabled.
        let fmris: Vec<String> = journal.smf.services.keys().cloned().collect();
        if let Err((fmri, e)) = super::super::keep_off::turn_off(env.platform, &fmris).await {
            errors.push(format!(
                "disable {fmri} (the component is disabled here): {e}"
            ));
        }
    }
    let paths = env.paths().clone();
    let j = journal.clone();
    errors.extend(blocking(move || clear(&paths, &j)).await);
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

/// New links and files go, the old tree and files come back, the old links
/// return, the instance UUID file is as it was.
fn undo_files(paths: &GzPaths, journal: &Journal) -> Vec<String> {
    let txn_dir = txn_dir_of(paths, journal);
    let aside = aside_dir(paths, &txn_dir);
    let mut errors = remove_new(paths, journal, &txn_dir, &aside);
    // The old tree and files come back.
    if let Some(old) = journal.change.old() {
        let aside = aside.join("tree");
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
    let aside_root = aside.join("root");
    if aside_root.exists() {
        match kinds::overlay_files(&aside_root) {
            Ok(files) => {
                for rel in files {
                    // One rename replaces whatever file is there: the path
                    // is never empty (agentsadm's binary).
                    let dest = paths.at(&rel);
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
    if let Some(old) = journal.change.old() {
        for link in &old.links {
            let r = make_link(paths, link).map_err(|e| io::Error::other(e.to_string()));
            note(&mut errors, format!("relink {}", link.path), r);
        }
    }
    // A previous tree that is neither back in place nor aside was deleted
    // by someone (a hook of the new package): say so, never stay silent.
    if let Some(tree) = journal.change.old().and_then(|o| o.tree.as_ref())
        && !fsutil::exists(&paths.at(tree))
    {
        errors.push(format!(
            "the previous version's {tree} is gone (its copy in {} was deleted during the transaction)",
            paths.rel(&aside)
        ));
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
    let inst_aside = aside.join("instance");
    if inst_aside.exists() {
        note(
            &mut errors,
            "restore the instance UUID file".into(),
            fsutil::rename_into(&inst_aside, &inst),
        );
    }
    errors
}

/// The new version's links, tree and overlay files go (an overlay file
/// the old version had stays, to be renamed back over).
fn remove_new(paths: &GzPaths, journal: &Journal, txn_dir: &Path, aside: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    // New links and files go.
    if let Some(new) = journal.change.installing() {
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
            let old_moved = aside.join("tree").exists();
            let old_had_tree = journal
                .change
                .old()
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
            // A file the old version had is renamed back over the new one
            // below: removing it first would leave the path empty.
            let restored = fsutil::exists(&aside.join("root").join(rel));
            let dest = paths.at(rel);
            if placed && !restored && fsutil::exists(&dest) && !dest.is_dir() {
                note(
                    &mut errors,
                    format!("remove new {rel}"),
                    fs::remove_file(&dest),
                );
            }
        }
    }
    errors
}

/// Directories this transaction created (deepest first, when empty), the
/// staging directory and the journal.
fn clear(paths: &GzPaths, journal: &Journal) -> Vec<String> {
    let mut errors = Vec::new();
    for d in journal.created_dirs.iter().rev() {
        let _ = fs::remove_dir(paths.at(d));
    }
    let txn_dir = txn_dir_of(paths, journal);
    discard(paths, &aside_dir(paths, &txn_dir));
    discard(paths, &txn_dir);
    let jpath = paths.journal_file(&journal.component);
    if let Err(e) = fs::remove_file(&jpath)
        && e.kind() != io::ErrorKind::NotFound
    {
        errors.push(format!("remove the journal {}: {e}", jpath.display()));
    }
    let _ = fsutil::fsync_dir(&paths.journal_dir());
    errors
}

/// Put the snapshot's manifest files back: remove the ones that did not
/// exist, copy back the ones that did. Returns the restored files (to
/// import again) and what failed.
fn restore_manifest_files(
    paths: &GzPaths,
    catalog: &Catalog,
    journal: &Journal,
    txn_dir: &Path,
) -> (Vec<(String, PathBuf)>, Vec<String>) {
    let mut errors = Vec::new();
    let strays = match &journal.smf.dir_before {
        Some(before) => super::manifests::strays(paths, catalog, &journal.component, before),
        None => Vec::new(),
    };
    for rel in journal.smf.absent.iter().chain(&strays) {
        let path = paths.at(rel);
        // A file or a link (dangling or not) the transaction created.
        let placed = fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir());
        if placed && let Err(e) = fs::remove_file(&path) {
            errors.push(format!("remove {rel}: {e}"));
        }
        // The subdirectories of apm's SMF directory it was written into
        // (a hostile postinstall's), when nothing else is left in them.
        let smf_dir = paths.smf_dir();
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(&smf_dir) && *d != smf_dir) {
            if fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    let mut restored = Vec::new();
    for rel in &journal.smf.backed_up {
        let saved = aside_dir(paths, txn_dir).join("smf").join(rel);
        let dest = paths.at(rel);
        // A new file renamed over whatever is at `dest`: never a copy
        // through a link a hook may have put there.
        let copied = (|| {
            let data = crate::fsutil::read_small(&saved)?;
            let mode = fs::metadata(&saved)?.permissions();
            fsutil::write_atomic(&dest, &data)?;
            fs::set_permissions(&dest, mode)
        })();
        match copied {
            Ok(()) => restored.push((rel.clone(), dest)),
            Err(e) => errors.push(format!("restore {rel}: {e}")),
        }
    }
    (restored, errors)
}

/// Put SMF back as the snapshot recorded it.
async fn restore_smf(env: &TxnEnv<'_>, journal: &Journal) -> Vec<String> {
    let smf = &journal.smf;
    if smf.services.is_empty()
        && smf.backed_up.is_empty()
        && smf.absent.is_empty()
        && smf.dir_before.is_none()
    {
        return Vec::new();
    }
    let chain = |e: &dyn std::error::Error| agentsadm_types::error::error_chain(e);
    let mut errors = Vec::new();
    let p = env.platform;
    // Services that did not exist before go.
    for (fmri, state) in &smf.services {
        if state.is_none() {
            match p.smf_state(fmri).await {
                Ok(Some(_)) => {
                    if let Err(e) = p.smf_delete(fmri).await {
                        errors.push(format!("delete {fmri}: {}", chain(&e)));
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("state of {fmri}: {}", chain(&e))),
            }
        }
    }
    // The old manifests come back and are imported again.
    let (restored, file_errors) = {
        let (paths, catalog) = (env.paths().clone(), env.catalog.clone());
        let j = journal.clone();
        blocking(move || {
            let txn_dir = txn_dir_of(&paths, &j);
            restore_manifest_files(&paths, &catalog, &j, &txn_dir)
        })
        .await
    };
    errors.extend(file_errors);
    for (rel, dest) in restored {
        if let Err(e) = p.smf_import(&dest).await {
            errors.push(format!("import {rel}: {}", chain(&e)));
        }
    }
    // Each instance enabled or disabled as it was.
    for (fmri, state) in &smf.services {
        let Some(want) = state else { continue };
        match p.smf_state(fmri).await {
            Ok(Some(now)) => {
                // An instance that stayed enabled may still run the new
                // version's code (from a tree that is gone): restart it.
                let r = if want.is_enabled() && !now.is_enabled() {
                    p.smf_enable(fmri).await
                } else if !want.is_enabled() && now.is_enabled() {
                    p.smf_disable(fmri).await
                } else if want.is_enabled() {
                    p.smf_restart(fmri).await
                } else {
                    Ok(())
                };
                if let Err(e) = r {
                    errors.push(format!("restore state of {fmri}: {}", chain(&e)));
                }
            }
            Ok(None) => errors.push(format!(
                "{fmri} was {want} before and is gone; import its manifest by hand"
            )),
            Err(e) => errors.push(format!("state of {fmri}: {}", chain(&e))),
        }
    }
    errors
}
