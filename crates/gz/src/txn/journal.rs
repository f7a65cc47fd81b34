//! The transaction journal: everything recovery needs, written before the
//! first change, and read back by the next run after a kill. What the
//! transaction changes is one typed [`Change`]; on disk it stays the
//! fields every earlier version wrote (`op`, `old`, `new`), and a file
//! whose fields do not make one change is refused as damaged rather than
//! assumed whole.

use serde::{Deserialize, Serialize};

use agentsadm_types::component::ComponentName;
use agentsadm_types::ids::InstanceUuid;

use super::Op;
use super::Phase;
use super::SmfSnapshot;
use crate::kinds::Footprint;

/// What a transaction changes, each kind with exactly the versions it has
/// (so no reader has to assume one is there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A fresh install (`old` is `None`) or an upgrade.
    Install {
        old: Option<Footprint>,
        new: Footprint,
    },
    /// `gz rollback`: the kept previous version (`new`) in place of `old`.
    Rollback {
        old: Option<Footprint>,
        new: Footprint,
    },
    /// A removal of what is installed.
    Remove { old: Footprint },
}

impl Change {
    pub fn op(&self) -> Op {
        match self {
            Change::Install { .. } => Op::Install,
            Change::Rollback { .. } => Op::Rollback,
            Change::Remove { .. } => Op::Remove,
        }
    }

    /// The version installed before, if there was one.
    pub fn old(&self) -> Option<&Footprint> {
        match self {
            Change::Install { old, .. } | Change::Rollback { old, .. } => old.as_ref(),
            Change::Remove { old } => Some(old),
        }
    }

    /// The version being put in place (none for a removal).
    pub fn installing(&self) -> Option<&Footprint> {
        match self {
            Change::Install { new, .. } | Change::Rollback { new, .. } => Some(new),
            Change::Remove { .. } => None,
        }
    }

    pub fn installing_mut(&mut self) -> Option<&mut Footprint> {
        match self {
            Change::Install { new, .. } | Change::Rollback { new, .. } => Some(new),
            Change::Remove { .. } => None,
        }
    }
}

/// What [`install`] puts in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstallOp {
    Install,
    /// The kept previous version (`gz rollback`).
    Rollback,
}

/// The journal: everything recovery needs, written before the first change.
/// On disk the change is the fields `op`, `old` and `new` (as every
/// earlier version wrote it); a journal whose fields do not make one
/// change is damaged ([`JournalError`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "JournalFile", into = "JournalFile")]
pub struct Journal {
    pub version: u32,
    /// The transaction directory's name under `staging/`.
    pub txn: String,
    pub change: Change,
    pub component: ComponentName,
    pub phase: Phase,
    /// The instance UUID file (root-relative) and whether this transaction
    /// created it.
    pub instance_file: String,
    pub instance: Option<InstanceUuid>,
    pub instance_created: bool,
    /// Directories that did not exist and may be created (removed on
    /// rollback when empty), root-relative, shallowest first.
    pub created_dirs: Vec<String>,
    pub smf: SmfSnapshot,
    /// Each hook this transaction started (recorded as it starts): a
    /// rollback ends what is left of them first.
    pub hook_groups: Vec<crate::hooks::HookGroup>,
    /// The component is disabled on this server ([`crate::keep_off`]):
    /// its services end disabled whichever way the transaction ends.
    pub keep_off: bool,
}

/// A journal file whose fields do not make one change.
#[derive(Debug, thiserror::Error)]
#[error("the {} journal of {component} {problem}", op.noun())]
pub struct JournalError {
    pub op: Op,
    pub component: ComponentName,
    pub problem: &'static str,
}

/// The journal as written to disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct JournalFile {
    version: u32,
    txn: String,
    op: Op,
    component: ComponentName,
    phase: Phase,
    old: Option<Footprint>,
    new: Option<Footprint>,
    instance_file: String,
    instance: Option<InstanceUuid>,
    instance_created: bool,
    created_dirs: Vec<String>,
    smf: SmfSnapshot,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    hook_groups: Vec<crate::hooks::HookGroup>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    keep_off: bool,
}

impl TryFrom<JournalFile> for Journal {
    type Error = JournalError;

    fn try_from(f: JournalFile) -> Result<Journal, JournalError> {
        let damaged = |problem| JournalError {
            op: f.op,
            component: f.component.clone(),
            problem,
        };
        let change = match (f.op, f.old.clone(), f.new.clone()) {
            (Op::Install, old, Some(new)) => Change::Install { old, new },
            (Op::Rollback, old, Some(new)) => Change::Rollback { old, new },
            (Op::Remove, Some(old), None) => Change::Remove { old },
            (Op::Remove, None, _) => return Err(damaged("has no old version to remove")),
            (Op::Remove, Some(_), Some(_)) => {
                return Err(damaged("has a new version, which a removal never has"));
            }
            (Op::Install | Op::Rollback, _, None) => {
                return Err(damaged("has no new version to put in place"));
            }
        };
        Ok(Journal {
            version: f.version,
            txn: f.txn,
            change,
            component: f.component,
            phase: f.phase,
            instance_file: f.instance_file,
            instance: f.instance,
            instance_created: f.instance_created,
            created_dirs: f.created_dirs,
            smf: f.smf,
            hook_groups: f.hook_groups,
            keep_off: f.keep_off,
        })
    }
}

impl From<Journal> for JournalFile {
    fn from(j: Journal) -> JournalFile {
        let op = j.change.op();
        let (old, new) = match j.change {
            Change::Install { old, new } | Change::Rollback { old, new } => (old, Some(new)),
            Change::Remove { old } => (Some(old), None),
        };
        JournalFile {
            version: j.version,
            txn: j.txn,
            op,
            component: j.component,
            phase: j.phase,
            old,
            new,
            instance_file: j.instance_file,
            instance: j.instance,
            instance_created: j.instance_created,
            created_dirs: j.created_dirs,
            smf: j.smf,
            hook_groups: j.hook_groups,
            keep_off: j.keep_off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footprint(version: &str) -> Footprint {
        Footprint {
            version: version.into(),
            tree: Some(format!(
                "opt/smartdc/agents/lib/node_modules/vm-agent-{version}"
            )),
            smf_manifests: vec!["opt/smartdc/agents/smf/vm-agent.xml".into()],
            apm: true,
            ..Footprint::default()
        }
    }

    fn journal(change: Change) -> Journal {
        Journal {
            version: 1,
            txn: "vm-agent-1".into(),
            change,
            component: "vm-agent".parse().unwrap(),
            phase: Phase::Swapping,
            instance_file: "opt/smartdc/agents/etc/vm-agent".into(),
            instance: None,
            instance_created: false,
            created_dirs: Vec::new(),
            smf: SmfSnapshot::default(),
            hook_groups: Vec::new(),
            keep_off: false,
        }
    }

    /// Every kind written and read back, in the fields earlier versions
    /// wrote (`op`, `old`, `new`), so a journal left by one is recovered
    /// by the next.
    #[test]
    fn every_kind_reads_back_in_the_earlier_fields() {
        let cases = [
            (
                Change::Install {
                    old: None,
                    new: footprint("1.0.0"),
                },
                "install",
                false,
                true,
            ),
            (
                Change::Install {
                    old: Some(footprint("1.0.0")),
                    new: footprint("1.1.0"),
                },
                "install",
                true,
                true,
            ),
            (
                Change::Rollback {
                    old: Some(footprint("1.1.0")),
                    new: footprint("1.0.0"),
                },
                "rollback",
                true,
                true,
            ),
            (
                Change::Remove {
                    old: footprint("1.0.0"),
                },
                "remove",
                true,
                false,
            ),
        ];
        for (change, op, has_old, has_new) in cases {
            let j = journal(change);
            let text = serde_json::to_string_pretty(&j).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["op"], op, "{text}");
            assert_eq!(!v["old"].is_null(), has_old, "{text}");
            assert_eq!(!v["new"].is_null(), has_new, "{text}");
            assert!(v.get("change").is_none(), "{text}");
            let back: Journal = serde_json::from_str(&text).unwrap();
            assert_eq!(back, j);
            assert_eq!(back.change.op().noun(), j.change.op().noun());
        }
    }

    /// A journal as the version before the typed change wrote it.
    #[test]
    fn a_journal_written_before_reads_as_its_change() {
        let text = r#"{
          "version": 1, "txn": "vm-agent-7", "op": "install",
          "component": "vm-agent", "phase": "committing",
          "old": {"version": "1.0.0", "apm": true},
          "new": {"version": "1.1.0", "apm": true},
          "instance_file": "opt/smartdc/agents/etc/vm-agent",
          "instance": null, "instance_created": true,
          "created_dirs": [], "smf": {"services": {}, "backed_up": [], "absent": []}
        }"#;
        let j: Journal = serde_json::from_str(text).unwrap();
        assert_eq!(j.phase, Phase::Committing);
        assert!(matches!(
            &j.change,
            Change::Install { old: Some(o), new } if o.version == "1.0.0" && new.version == "1.1.0"
        ));
        assert!(!j.keep_off && j.hook_groups.is_empty());
    }

    /// A journal whose fields do not make one change is damaged, named as
    /// such, never taken as a change with a version missing.
    #[test]
    fn a_damaged_journal_is_refused_with_what_is_missing() {
        let whole = serde_json::to_value(journal(Change::Remove {
            old: footprint("1.0.0"),
        }))
        .unwrap();
        let with = |op: &str, old: bool, new: bool| {
            let mut v = whole.clone();
            v["op"] = op.into();
            v["old"] = if old {
                serde_json::to_value(footprint("1.0.0")).unwrap()
            } else {
                serde_json::Value::Null
            };
            v["new"] = if new {
                serde_json::to_value(footprint("1.1.0")).unwrap()
            } else {
                serde_json::Value::Null
            };
            v.to_string()
        };
        for (text, says) in [
            (
                with("remove", false, false),
                "removal journal of vm-agent has no old",
            ),
            (
                with("remove", true, true),
                "has a new version, which a removal",
            ),
            (
                with("install", true, false),
                "install journal of vm-agent has no new",
            ),
            (
                with("rollback", false, false),
                "rollback journal of vm-agent has no new",
            ),
        ] {
            let err = serde_json::from_str::<Journal>(&text).unwrap_err();
            let m = err.to_string();
            assert!(m.contains(says) && m.contains("vm-agent"), "{m}");
        }
        // Not a journal at all.
        for text in [
            with("upgrade", true, true),
            "{\"version\": 1, \"txn\": ".to_string(),
            String::new(),
        ] {
            assert!(serde_json::from_str::<Journal>(&text).is_err(), "{text}");
        }
    }
}
