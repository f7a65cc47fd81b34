//! One entry of `server.agents` (CNAPI's record of what a server runs, and
//! the servers' own `agentsadm gz report`), read leniently: a server (or
//! whatever wrote its CNAPI record) may report anything, and one bad entry
//! must not make a whole ServerList unreadable. An entry that is not what
//! cn-agent reports (not an object, a name that is not an agent name, a
//! version too long, a UUID that is not one) is kept, bounded, with the
//! [`AgentEntry::problem`] that names its field, so that the server it came
//! from can be set aside with a finding while every other server goes on.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::output::clip;

/// The longest agent name accepted (real ones are a few dozen bytes).
pub const MAX_AGENT_NAME: usize = 128;
/// The longest version accepted.
pub const MAX_AGENT_VERSION: usize = 64;
/// How much of a bad value is kept and echoed.
const ECHO: usize = 60;

/// One entry of `server.agents` as cn-agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct AgentEntry {
    pub name: String,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    /// The SAPI instance UUID (absent when `etc/<name>` is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<InstanceUuid>,
    /// What is wrong with the entry as reported (`uuid "zz" is not a
    /// UUID`), naming the field; the values above are then bounded
    /// stand-ins. Never serialized.
    #[serde(skip)]
    pub problem: Option<String>,
}

impl AgentEntry {
    /// A well-formed entry.
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        image_uuid: Option<ImageUuid>,
        uuid: Option<InstanceUuid>,
    ) -> AgentEntry {
        AgentEntry {
            name: name.into(),
            version: version.into(),
            image_uuid,
            uuid,
            problem: None,
        }
    }

    /// Read one entry as reported, whatever it is.
    pub fn from_value(v: &Value) -> AgentEntry {
        let mut entry = AgentEntry::new("", "", None, None);
        let Some(o) = v.as_object() else {
            entry.problem = Some(format!("is not an object: {}", clip(&v.to_string(), ECHO)));
            return entry;
        };
        let mut problems: Vec<String> = Vec::new();
        match o.get("name") {
            Some(Value::String(s)) if is_agent_name(s) => entry.name = s.clone(),
            Some(Value::String(s)) => {
                entry.name = clip(s, ECHO);
                problems.push(format!(
                    "name {:?} is not an agent name (1 to {MAX_AGENT_NAME} printable characters)",
                    entry.name
                ));
            }
            other => problems.push(format!("name is {}", what(other))),
        }
        match o.get("version") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.len() <= MAX_AGENT_VERSION && printable(s) => {
                entry.version = s.clone();
            }
            Some(other) => {
                entry.version = clip(&other.to_string(), ECHO);
                problems.push(format!("version {} is not a version", entry.version));
            }
        }
        entry.image_uuid = uuid_field(o.get("image_uuid"), "image_uuid", &mut problems);
        entry.uuid = uuid_field(o.get("uuid"), "uuid", &mut problems);
        if !problems.is_empty() {
            entry.problem = Some(problems.join("; "));
        }
        entry
    }
}

impl<'de> Deserialize<'de> for AgentEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AgentEntry, D::Error> {
        Ok(AgentEntry::from_value(&Value::deserialize(d)?))
    }
}

fn printable(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

fn is_agent_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_AGENT_NAME && printable(s) && !s.contains('/')
}

fn what(v: Option<&Value>) -> String {
    match v {
        None => "missing".to_string(),
        Some(v) => format!("not a string: {}", clip(&v.to_string(), ECHO)),
    }
}

/// A UUID field: absent or null is none; anything else must be a UUID.
fn uuid_field<T: std::str::FromStr>(
    v: Option<&Value>,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<T> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.parse() {
            Ok(u) => Some(u),
            Err(_) => {
                problems.push(format!("{field} {:?} is not a UUID", clip(s, ECHO)));
                None
            }
        },
        Some(other) => {
            problems.push(format!("{field} is {}", what(Some(other))));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_entries_are_kept_bounded_with_their_problem() {
        let list: Vec<AgentEntry> = serde_json::from_value(json!([
            {"name": "vm-agent", "version": "1.0.0",
             "image_uuid": "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f",
             "uuid": "04a3fd8b-da16-4f8d-a003-06dc52f0a1e3"},
            {"name": "net-agent", "uuid": "not-a-uuid"},
            {"name": "x".repeat(10 << 20)},
            {"name": "a\u{1b}[2J"},
            42
        ]))
        .unwrap();
        assert_eq!(list.len(), 5);
        assert!(list[0].problem.is_none() && list[0].uuid.is_some());
        assert!(
            list[1]
                .problem
                .as_deref()
                .unwrap()
                .starts_with("uuid \"not-a-uuid\"")
        );
        assert!(list[2].name.len() < 100, "bounded");
        assert!(list[2].problem.as_deref().unwrap().starts_with("name"));
        assert!(!list[3].name.contains('\u{1b}'));
        assert!(
            list[4]
                .problem
                .as_deref()
                .unwrap()
                .contains("not an object")
        );
        // Serialized without the problem, as cn-agent writes it.
        let v = serde_json::to_value(&list[0]).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 4);
    }
}
