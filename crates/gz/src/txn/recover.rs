//! Recovery: finish or undo every transaction a killed run left behind,
//! then clear leftover staging directories, partial downloads and trash.
//! Runs under the server lock before anything else.

use std::fs;
use std::io;
use std::path::PathBuf;

use agentsadm_platform::blocking;

use super::super::fsutil;
use super::super::paths::GzPaths;
use super::Op;
use super::Phase;
use super::TxnEnv;
use super::commit;
use super::read_journal;
use super::rollback;

/// What recovery did with one journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub component: String,
    pub op: Op,
    /// `true`: the interrupted transaction was finished; `false`: undone.
    pub finished: bool,
    pub errors: Vec<String>,
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

/// Finish (a `committing` journal) or undo (a `swapping` one) every
/// interrupted transaction, in journal name order, then clear leftovers.
pub async fn recover(env: &TxnEnv<'_>) -> Result<Vec<Recovered>, RecoverError> {
    let paths = env.paths().clone();
    let journals = blocking(move || journal_files(&paths)).await?;
    let mut out = Vec::new();
    for path in journals {
        let p = path.clone();
        let journal = blocking(move || read_journal(&p))
            .await
            .map_err(|err| RecoverError { path, err })?;
        let finished = journal.phase == Phase::Committing;
        let errors = if finished {
            commit(env, &journal).await.into_iter().collect()
        } else {
            rollback(env, &journal).await
        };
        tracing::warn!(component = %journal.component, finished, "recovered an interrupted transaction");
        out.push(Recovered {
            component: journal.component.to_string(),
            op: journal.change.op(),
            finished,
            errors,
        });
    }
    let paths = env.paths().clone();
    blocking(move || clear_leftovers(&paths)).await;
    Ok(out)
}

/// The journal files, sorted.
fn journal_files(paths: &GzPaths) -> Result<Vec<PathBuf>, RecoverError> {
    let jdir = paths.journal_dir();
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
    Ok(journals)
}

/// `.<name>.<number>.tmp`, the temporary name of an atomic write
/// ([`fsutil::write_atomic`], the rooted platform's SMF state).
fn is_atomic_tmp(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    match inner.rsplit_once('.') {
        Some((base, n)) => {
            !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Leftovers of runs that died before writing a journal.
fn clear_leftovers(paths: &GzPaths) {
    for dir in [
        paths.staging_dir(),
        paths.state_dir().join("aside"),
        paths.trash_dir(),
    ] {
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                let _ = fsutil::remove_any(&e.path());
            }
        }
    }
    // Temporary files of atomic writes a kill interrupted (journal, SMF
    // state, records, instance UUIDs, rendered manifests): nothing reads
    // them and no later write reuses their names.
    for dir in [
        paths.state_dir(),
        paths.journal_dir(),
        paths.records_dir(),
        paths.state_dir().join("broken"),
        super::super::keep_off::records_dir(paths),
        super::super::keep_off::pending_dir(paths),
        paths.etc_dir(),
        paths.smf_dir(),
        paths.site_manifests(),
        paths.at("var/svc"),
        paths.at("opt/smartdc/etc"),
        paths.at("opt/smartdc/docker/etc"),
        paths.at("var/sdcadm"),
    ] {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let regular = e.file_type().is_ok_and(|t| t.is_file());
            if regular && is_atomic_tmp(&e.file_name().to_string_lossy()) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    if let Ok(rd) = fs::read_dir(paths.downloads_dir()) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".partial") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_temporaries_are_recognised() {
        assert!(is_atomic_tmp(".vm-agent.json.3735928559.tmp"));
        assert!(is_atomic_tmp(".smf-state.0000abcd.tmp"));
        assert!(!is_atomic_tmp("vm-agent.json.1.tmp"));
        assert!(!is_atomic_tmp(".keep.tmp"));
        assert!(!is_atomic_tmp(".x.12.tmpx"));
        assert!(!is_atomic_tmp(".x.zz.tmp"));
    }
}
