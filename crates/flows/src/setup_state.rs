//! `/var/lib/setup.json`, the setup state joysetup.sh creates and the setup
//! scripts update (docs/triton/setup-flows.md §1.3, §2.4): `seen_states`
//! (a list of state names such as `tools_installed`, `agents_installed`),
//! `current_state`, `complete` and `last_updated`. Other keys
//! (`node_type`, `start_time`, ...) are kept as they are.
//!
//! `installer/agentsetup.sh` updates it through `agentsadm installer
//! state`, so no shell JSON tool is needed. The file must exist (joysetup
//! creates it); writes are atomic (temporary file, rename).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Map, Value};

/// Where the file lives, relative to the GZ root.
pub const SETUP_FILE: &str = "var/lib/setup.json";

/// The setup state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SetupStateError {
    #[error(
        "cannot read the setup state {path} (joysetup.sh creates it; is this server being set up?)"
    )]
    Read {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("the setup state {path} is not a JSON object; fix or remove it")]
    Parse { path: PathBuf, detail: String },
    #[error("cannot write the setup state {path}")]
    Write {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
}

/// The setup state of one GZ.
#[derive(Clone, Debug, PartialEq)]
pub struct SetupState {
    path: PathBuf,
    doc: Map<String, Value>,
}

impl SetupState {
    /// Read `<root>/var/lib/setup.json`.
    pub fn load(root: &Path) -> Result<SetupState, SetupStateError> {
        let path = root.join(SETUP_FILE);
        let text = agentsadm_types::bounded::read_small_io(&path).map_err(|err| {
            SetupStateError::Read {
                path: path.clone(),
                err,
            }
        })?;
        let doc = match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Err(SetupStateError::Parse {
                    path,
                    detail: "not an object".into(),
                });
            }
            Err(e) => {
                return Err(SetupStateError::Parse {
                    path,
                    detail: e.to_string(),
                });
            }
        };
        Ok(SetupState { path, doc })
    }

    /// The states seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.doc
            .get("seen_states")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn has(&self, state: &str) -> bool {
        self.seen().iter().any(|s| s == state)
    }

    pub fn is_complete(&self) -> bool {
        self.doc.get("complete").and_then(Value::as_bool) == Some(true)
    }

    /// Record `state` as seen (once) and current.
    pub fn add(&mut self, state: &str) {
        let seen = self
            .doc
            .entry("seen_states")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !seen.is_array() {
            *seen = Value::Array(Vec::new());
        }
        if let Value::Array(a) = seen
            && !a.iter().any(|v| v.as_str() == Some(state))
        {
            a.push(Value::String(state.to_string()));
        }
        self.doc
            .insert("current_state".into(), Value::String(state.to_string()));
        self.touch();
    }

    /// `complete: true`, as mark_as_setup does.
    pub fn mark_complete(&mut self) {
        self.doc.insert("complete".into(), Value::Bool(true));
        self.touch();
    }

    fn touch(&mut self) {
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        self.doc.insert("last_updated".into(), Value::String(now));
    }

    /// The document as it will be written.
    pub fn to_json(&self) -> Value {
        Value::Object(self.doc.clone())
    }

    /// Write it back atomically.
    pub fn save(&self) -> Result<(), SetupStateError> {
        let write_err = |err| SetupStateError::Write {
            path: self.path.clone(),
            err,
        };
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(&self.doc).unwrap_or_default();
        std::fs::write(&tmp, text).map_err(write_err)?;
        std::fs::rename(&tmp, &self.path).map_err(write_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_states_once_and_keeps_other_keys() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join(SETUP_FILE);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            &p,
            r#"{"node_type":"computenode","seen_states":["zpool_created"],"complete":false}"#,
        )
        .unwrap();
        let mut s = SetupState::load(root.path()).unwrap();
        assert!(!s.has("tools_installed"));
        s.add("tools_installed");
        s.add("tools_installed");
        s.add("agents_installed");
        s.mark_complete();
        s.save().unwrap();
        let s = SetupState::load(root.path()).unwrap();
        assert_eq!(
            s.seen(),
            vec!["zpool_created", "tools_installed", "agents_installed"]
        );
        assert!(s.is_complete());
        assert_eq!(s.to_json()["node_type"], "computenode");
        assert_eq!(s.to_json()["current_state"], "agents_installed");

        let missing = tempfile::tempdir().unwrap();
        let e = SetupState::load(missing.path()).unwrap_err();
        assert!(e.to_string().contains("joysetup.sh creates it"), "{e}");
        std::fs::write(&p, "[1]").unwrap();
        assert!(SetupState::load(root.path()).is_err());
    }
}
