//! Steps 3-6 of an install (the old version out, the new one in, SMF,
//! SAPI) and the steps of a removal. Any error is undone by the caller
//! ([`super::finish`]). File work runs on the blocking pool; hooks, SMF and
//! SAPI are awaited; checkpoints run on the task.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agentsadm_platform::PlatformError;
use agentsadm_platform::blocking;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::InstanceUuid;

use super::super::adopt;

use super::super::adopt::Adoption;
use super::super::fsutil;
use super::super::health;
use super::super::hooks;
use super::super::kinds;
use super::super::kinds::Footprint;
use super::super::kinds::Link;
use super::super::kinds::StagedVersion;
use super::super::package;
use super::super::package::Hook;
use super::super::package::PackageJson;
use super::super::paths::GzPaths;
use super::super::step::Step;
use super::Journal;
use super::TxnEnv;
use super::TxnError;
use super::fs_err;
use super::manifests;
use super::write_journal;

/// Where the instance UUID file sits inside the tree `tree`, if it does.
fn inside_tree<'a>(instance_file: &'a str, tree: Option<&str>) -> Option<&'a str> {
    instance_file.strip_prefix(tree?)?.strip_prefix('/')
}

/// Steps 3-6 of an install; returns what SAPI adoption did.
pub(super) async fn swap_in(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
    txn_dir: &Path,
    staged: &StagedVersion,
    instance: InstanceUuid,
) -> Result<Option<Adoption>, TxnError> {
    let paths = env.paths().clone();
    let new = &staged.footprint;
    // The instance UUID: inside the tree it goes into the staged copy, kept
    // or new (the old tree takes its copy away); elsewhere it is written
    // only when new.
    let instance_path = match (
        inside_tree(&journal.instance_file, new.tree.as_deref()),
        &staged.tree_src,
    ) {
        (Some(inside), Some(src)) => Some(src.join(inside)),
        _ if journal.instance_created => Some(paths.at(&journal.instance_file)),
        _ => None,
    };
    if let Some(path) = instance_path {
        blocking(move || {
            fsutil::write_atomic(&path, format!("{instance}\n").as_bytes()).map_err(fs_err(
                Step::Instance,
                "write the instance UUID file",
                &path,
            ))
        })
        .await?;
    }
    // 3. The old package out.
    if let Some(old) = journal.change.old().cloned() {
        remove_old(env, journal, &old, txn_dir).await?;
    }
    {
        let (paths, txn_dir) = (paths.clone(), txn_dir.to_path_buf());
        let change = &journal.change;
        let (new, old) = (change.installing().cloned(), change.old().cloned());
        blocking(move || move_overlay_out(&paths, new.as_ref(), &txn_dir, old.as_ref())).await?;
    }
    env.checkpoint("after-move-old");
    // 4. The new package in, after apm's prefix directories (in the
    // journal's created_dirs: a rollback removes the ones made here).
    if new.apm {
        let paths = paths.clone();
        blocking(move || create_prefix_dirs(&paths)).await?;
    }
    if let (Some(pkg), Some(src)) = (&staged.package, &staged.tree_src) {
        run_hook(env, journal, Hook::Preinstall, pkg, src).await?;
    }
    {
        let (paths, new) = (paths.clone(), new.clone());
        let (tree_src, overlay_src) = (staged.tree_src.clone(), staged.overlay_src.clone());
        blocking(move || place_new(&paths, &new, tree_src.as_deref(), overlay_src.as_deref()))
            .await?;
    }
    env.checkpoint("after-place-new");
    {
        let (paths, new, package) = (paths.clone(), new.clone(), staged.package.clone());
        blocking(move || link_new(&paths, &new, package.as_ref())).await?;
    }
    postinstall(env, component, journal, txn_dir, staged).await?;
    // 5. SMF.
    let imports = import_smf(env, component, journal, new.apm).await?;
    env.checkpoint("after-smf");
    // 5b. A component disabled here stays off, whatever the postinstall
    // and the import enabled; its gate checks that it stays off.
    if journal.keep_off && env.layout.runs_services() {
        let fmris = keep_off_now(env, journal, &imports).await?;
        env.checkpoint("after-keep-off");
        if let Some(gate) = env.gate {
            super::super::keep_off::check_off(env.platform, &fmris, gate)
                .await
                .map_err(|err| TxnError::Unhealthy {
                    component: journal.component.to_string(),
                    err,
                })?;
            env.checkpoint("after-health");
        }
    }
    // 6. The health gate, then SAPI.
    if let Some(gate) = env.gate
        && env.layout.runs_services()
        && !journal.keep_off
    {
        let files: Vec<PathBuf> = imports.iter().map(|rel| paths.at(rel)).collect();
        let before = journal.smf.services.clone();
        let fmris = blocking(move || health::expected_instances(&files, &before))
            .await
            .map_err(|err| TxnError::Smf {
                action: "manifest read",
                target: journal.component.to_string(),
                err: Box::new(err),
            })?;
        health::wait_healthy(env.platform, &fmris, gate)
            .await
            .map_err(|err| TxnError::Unhealthy {
                component: journal.component.to_string(),
                err,
            })?;
        env.checkpoint("after-health");
    }
    let adoption = match (&env.sapi, new.image_uuid) {
        (Some(sapi), Some(image)) => Some(
            adopt::adopt(
                sapi.client,
                &journal.component,
                instance,
                sapi.server,
                image,
            )
            .await
            .map_err(|err| TxnError::Sapi { err })?,
        ),
        _ => None,
    };
    env.checkpoint("after-adopt");
    Ok(adoption)
}

/// The new version's postinstall, and what it wrote into apm's SMF
/// directory journaled and checked ([`manifests`]), whether it succeeded
/// or not.
async fn postinstall(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
    txn_dir: &Path,
    staged: &StagedVersion,
) -> Result<(), TxnError> {
    let (Some(pkg), Some(tree)) = (&staged.package, &staged.footprint.tree) else {
        return Ok(());
    };
    let installed = env.paths().at(tree);
    let hooks_run = env.hooks.skip.is_none();
    let watch = {
        let (paths, installed) = (env.paths().clone(), installed.clone());
        blocking(move || manifests::before_postinstall(&paths, &installed)).await?
    };
    if !hooks_run {
        return run_hook(env, journal, Hook::Postinstall, pkg, &installed).await;
    }
    // The journal knows what was there, for a run killed mid-hook (it is
    // written as the hook starts, with the hook).
    journal.smf.dir_before = Some(manifests::listing(&watch));
    let ran = run_hook(env, journal, Hook::Postinstall, pkg, &installed).await;
    let (watch, refused) =
        manifests::journal_written(env, component, journal, txn_dir, watch).await?;
    ran?;
    if let Some(refused) = refused {
        return Err(refused);
    }
    manifests::check_written(env, component, journal, watch).await
}

/// Import the new version's manifests (and those its postinstall wrote
/// beyond its templates), each checked immediately before its import.
/// Where hooks do not run (a copy of a GZ on a SmartOS host), an apm
/// package's manifests were never written: nothing to import. Returns the
/// manifests imported.
async fn import_smf(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &Journal,
    apm: bool,
) -> Result<Vec<String>, TxnError> {
    let paths = env.paths().clone();
    let hooks_run = env.hooks.skip.is_none();
    let imports: Vec<String> = journal
        .change
        .installing()
        .map(|n| n.smf_manifests.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|rel| hooks_run || !apm || fsutil::exists(&paths.at(rel)))
        .collect();
    for rel in &imports {
        if env.layout.runs_services() {
            let (paths, catalog, me, rel) = (
                paths.clone(),
                env.catalog.clone(),
                component.clone(),
                rel.clone(),
            );
            let others = env.others.cloned();
            blocking(move || {
                manifests::check_before_import(&catalog, &me, others.as_ref(), &paths, &rel)
            })
            .await?;
        }
        env.platform
            .smf_import(&paths.at(rel))
            .await
            .map_err(|err| TxnError::Smf {
                action: "import",
                target: rel.clone(),
                err: Box::new(err),
            })?;
    }
    Ok(imports)
}

/// The steps of a removal; any error is undone by the caller.
pub(super) async fn remove_steps(
    env: &TxnEnv<'_>,
    component: &Component,
    journal: &mut Journal,
    old: &Footprint,
    txn_dir: &Path,
) -> Result<(), TxnError> {
    remove_old(env, journal, old, txn_dir).await?;
    {
        let paths = env.paths().clone();
        let (old, txn_dir) = (old.clone(), txn_dir.to_path_buf());
        let inst = paths.at(&journal.instance_file);
        blocking(move || {
            move_overlay_out(&paths, None, &txn_dir, Some(&old))?;
            if fsutil::exists(&inst) {
                let dst = super::aside_dir(&paths, &txn_dir).join("instance");
                fsutil::rename_into(&inst, &dst).map_err(fs_err(
                    Step::Swap,
                    "move aside",
                    &inst,
                ))?;
            }
            Ok::<_, TxnError>(())
        })
        .await?;
    }
    env.checkpoint("after-move-old");
    for fmri in journal.smf.services.keys() {
        env.platform
            .smf_delete(fmri)
            .await
            .map_err(|err| TxnError::Smf {
                action: "delete",
                target: fmri.clone(),
                err: Box::new(err),
            })?;
    }
    {
        let paths = env.paths().clone();
        let manifests = old.smf_manifests.clone();
        blocking(move || {
            for rel in &manifests {
                let p = paths.at(rel);
                if p.is_file() {
                    fs::remove_file(&p).map_err(fs_err(Step::Smf, "remove", &p))?;
                }
            }
            Ok::<_, TxnError>(())
        })
        .await?;
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

/// Run a hook, journaling it as soon as it starts.
async fn run_hook(
    env: &TxnEnv<'_>,
    journal: &mut Journal,
    hook: Hook,
    pkg: &PackageJson,
    cwd: &Path,
) -> Result<(), TxnError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let record = async {
        match rx.await {
            Ok(group) => {
                journal.hook_groups.push(group);
                write_journal(env, journal).await
            }
            // No such hook, or it could not start.
            Err(_) => Ok(()),
        }
    };
    let (ran, recorded) = tokio::join!(
        hooks::run_hook_recorded(hook, pkg, cwd, env.hooks, Some(tx)),
        record
    );
    recorded?;
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
            package: pkg.name.to_string(),
            err: Box::new(err),
        }),
    }
}

/// Old package: uninstall hooks, unlink its links, move its tree aside.
async fn remove_old(
    env: &TxnEnv<'_>,
    journal: &mut Journal,
    old: &Footprint,
    txn_dir: &Path,
) -> Result<(), TxnError> {
    let paths = env.paths().clone();
    let (tree, package) = {
        let (paths, old) = (paths.clone(), old.clone());
        blocking(move || {
            let tree = old
                .tree
                .as_ref()
                .map(|t| paths.at(t))
                .filter(|t| t.is_dir());
            // No package.json: no hooks to run.
            let package = match &tree {
                Some(dir) if old.apm => {
                    PackageJson::read(dir).map_err(|err| TxnError::Package {
                        package: paths.rel(dir),
                        err,
                    })?
                }
                _ => None,
            };
            Ok::<_, TxnError>((tree, package))
        })
        .await?
    };
    if let (Some(dir), Some(pkg)) = (&tree, &package) {
        run_hook(env, journal, Hook::Preuninstall, pkg, dir).await?;
        run_hook(env, journal, Hook::Postuninstall, pkg, dir).await?;
    }
    env.checkpoint("after-old-hooks");
    let (links, txn_dir) = (old.links.clone(), txn_dir.to_path_buf());
    blocking(move || {
        for link in &links {
            unlink_owned(&paths, link).map_err(fs_err(
                Step::Swap,
                "unlink",
                &paths.at(&link.path),
            ))?;
        }
        if let Some(dir) = tree {
            let dst = super::aside_dir(&paths, &txn_dir).join("tree");
            fsutil::rename_into(&dir, &dst).map_err(fs_err(
                Step::Swap,
                "move the old version out of",
                &dir,
            ))?;
        }
        Ok(())
    })
    .await
}

/// Move every existing file of the old and new overlays into `<aside>/root`.
/// A regular file the new version replaces is kept there by a hard link
/// and stays in place until the new one is renamed over it: a path both
/// versions have (agentsadm's own binary) is never missing, and a rollback
/// renames the old file back over the new one.
fn move_overlay_out(
    paths: &GzPaths,
    new: Option<&Footprint>,
    txn_dir: &Path,
    old: Option<&Footprint>,
) -> Result<(), TxnError> {
    for rel in kinds::overlay_union(old, new) {
        let src = paths.at(&rel);
        let Ok(md) = fs::symlink_metadata(&src) else {
            continue;
        };
        if md.is_dir() {
            continue;
        }
        let dst = super::aside_dir(paths, txn_dir).join("root").join(&rel);
        let replaced = new.is_some_and(|n| n.overlay.contains(&rel));
        if replaced && md.file_type().is_file() && keep_by_link(&src, &dst).is_ok() {
            continue;
        }
        fsutil::rename_into(&src, &dst).map_err(fs_err(Step::Swap, "move aside", &src))?;
    }
    Ok(())
}

/// A second name for `src` at `dst` (a leftover at `dst` from an
/// interrupted run is replaced), durable before the caller goes on.
fn keep_by_link(src: &Path, dst: &Path) -> io::Result<()> {
    let dir = dst.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    match fs::remove_file(dst) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::hard_link(src, dst)?;
    fsutil::fsync_dir(dir)
}

/// Rename the staged tree into place and lay the overlay files.
fn place_new(
    paths: &GzPaths,
    new: &Footprint,
    tree_src: Option<&Path>,
    overlay_src: Option<&Path>,
) -> Result<(), TxnError> {
    if let (Some(dest), Some(src)) = (&new.tree, tree_src) {
        let dest = paths.at(dest);
        fsutil::rename_into(src, &dest).map_err(fs_err(
            Step::Swap,
            "move the new version into",
            &dest,
        ))?;
    }
    if let Some(root) = overlay_src {
        for rel in &new.overlay {
            let src = root.join(rel);
            let dst = paths.at(rel);
            fsutil::rename_into(&src, &dst).map_err(fs_err(Step::Swap, "place", &dst))?;
        }
    }
    Ok(())
}

/// apm bins executable, then every link of the new version.
fn link_new(
    paths: &GzPaths,
    new: &Footprint,
    package: Option<&PackageJson>,
) -> Result<(), TxnError> {
    if let (Some(pkg), Some(tree)) = (package, &new.tree) {
        // apm: bins are made executable before they are linked.
        for path in pkg.bin.values() {
            let target = paths.at(tree).join(package::clean_relative(path));
            // lstat: a bin that is a link is never followed (it could lead
            // out of the package, and chmod would change what it names).
            let regular = fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_file());
            if regular {
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).map_err(fs_err(
                    Step::Swap,
                    "chmod",
                    &target,
                ))?;
            }
        }
    }
    for link in &new.links {
        make_link(paths, link)?;
    }
    Ok(())
}

/// Create or replace a link we own; refuse to clobber anything else.
pub(super) fn make_link(paths: &GzPaths, link: &Link) -> Result<(), TxnError> {
    let path = paths.at(&link.path);
    match fs::symlink_metadata(&path) {
        Ok(md) if md.file_type().is_symlink() => {
            fs::remove_file(&path).map_err(fs_err(Step::Swap, "replace the link", &path))?;
        }
        Ok(_) => return Err(TxnError::LinkConflict { path }),
        Err(_) => {}
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(fs_err(Step::Swap, "create", parent))?;
    }
    std::os::unix::fs::symlink(&link.target, &path).map_err(fs_err(Step::Swap, "link", &path))
}

/// Remove a link if it still points where we put it.
pub(super) fn unlink_owned(paths: &GzPaths, link: &Link) -> io::Result<()> {
    let path = paths.at(&link.path);
    match fs::read_link(&path) {
        Ok(t) if t == Path::new(&link.target) => fs::remove_file(&path),
        _ => Ok(()),
    }
}

/// `/opt/smartdc/agents/{tmp,lib/node_modules,bin,smf,etc,db}`, as apm
/// makes them before it installs anything.
fn create_prefix_dirs(paths: &GzPaths) -> Result<(), TxnError> {
    for dir in super::APM_PREFIX_DIRS {
        let dir = paths.prefix().join(dir);
        fs::create_dir_all(&dir).map_err(fs_err(Step::Swap, "create", &dir))?;
    }
    Ok(())
}

/// Disable every instance of a component kept off: those its new
/// manifests define and those the transaction's snapshot knows. Returns
/// them all (for its gate).
async fn keep_off_now(
    env: &TxnEnv<'_>,
    journal: &Journal,
    imports: &[String],
) -> Result<Vec<String>, TxnError> {
    let files: Vec<PathBuf> = imports.iter().map(|rel| env.paths().at(rel)).collect();
    let known: Vec<String> = journal.smf.services.keys().cloned().collect();
    let smf_err = |action: &'static str, target: String, err: PlatformError| TxnError::Smf {
        action,
        target,
        err: Box::new(err),
    };
    let fmris = blocking(move || super::super::keep_off::instances(&files, &known))
        .await
        .map_err(|err| smf_err("manifest read", journal.component.to_string(), err))?;
    super::super::keep_off::turn_off(env.platform, &fmris)
        .await
        .map_err(|(fmri, err)| smf_err("disable", fmri, err))?;
    Ok(fmris)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_files_inside_the_tree_are_found() {
        let tree = Some("agents/vm-agent");
        assert_eq!(
            inside_tree("agents/vm-agent/instance_uuid", tree),
            Some("instance_uuid")
        );
        assert_eq!(inside_tree("agents/vm-agent-x/instance_uuid", tree), None);
        assert_eq!(inside_tree("opt/smartdc/agents/etc/vm-agent", tree), None);
        assert_eq!(inside_tree("agents/vm-agent/instance_uuid", None), None);
    }
}
