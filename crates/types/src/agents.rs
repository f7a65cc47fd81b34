//! One entry of `server.agents` (CNAPI's record of what a server runs, and
//! the servers' own `agentsadm gz report`). An [`AgentEntry`] is what
//! cn-agent reports: a [`ComponentName`], a [`ComponentVersion`] and the
//! image and instance UUIDs; decoding one refuses anything else. A
//! `server.agents` list is read leniently ([`read_agents`]): a server (or
//! whatever wrote its CNAPI record) may report anything, and one bad entry
//! must not make a whole ServerList unreadable, so each entry that is not
//! what cn-agent reports (not an object, a name that is not a component
//! name, a version too long, a UUID that is not one) is set aside as an
//! [`AgentProblem`] naming its field, and the server it came from can be
//! set aside with a finding while every other server goes on.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::component::{ComponentName, ComponentVersion};
use crate::ids::ImageUuid;
use crate::ids::InstanceUuid;
use crate::output::clip;

/// How much of a bad value is kept and echoed.
const ECHO: usize = 60;

/// One entry of `server.agents` as cn-agent reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct AgentEntry {
    pub name: ComponentName,
    /// `""` (unknown) when the entry has none, as cn-agent writes it.
    pub version: ComponentVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_uuid: Option<ImageUuid>,
    /// The SAPI instance UUID (absent when `etc/<name>` is missing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<InstanceUuid>,
}

/// A `server.agents` entry that is not one (`uuid "zz" is not a UUID`),
/// naming the field; `index` is its place in the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentProblem {
    pub index: usize,
    pub problem: String,
}

impl std::fmt::Display for AgentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server.agents[{}]: {}", self.index, self.problem)
    }
}

impl AgentEntry {
    /// Read one entry as reported, whatever it is: the entry, or what is
    /// wrong with it (every bad field, bounded).
    pub fn from_value(v: &Value) -> Result<AgentEntry, String> {
        let Some(o) = v.as_object() else {
            return Err(format!("is not an object: {}", clip(&v.to_string(), ECHO)));
        };
        let mut problems: Vec<String> = Vec::new();
        let name = match o.get("name") {
            Some(Value::String(s)) => ComponentName::new(s.as_str())
                .map_err(|e| problems.push(format!("name {e}")))
                .ok(),
            other => {
                problems.push(format!("name is {}", what(other)));
                None
            }
        };
        let version = match o.get("version") {
            None | Some(Value::Null) => Some(ComponentVersion::unknown()),
            Some(Value::String(s)) => ComponentVersion::new(s.as_str())
                .map_err(|e| problems.push(format!("version {e}")))
                .ok(),
            Some(other) => {
                problems.push(format!(
                    "version {} is not a version",
                    clip(&other.to_string(), ECHO)
                ));
                None
            }
        };
        let image_uuid = uuid_field(o.get("image_uuid"), "image_uuid", &mut problems);
        let uuid = uuid_field(o.get("uuid"), "uuid", &mut problems);
        match (name, version) {
            (Some(name), Some(version)) if problems.is_empty() => Ok(AgentEntry {
                name,
                version,
                image_uuid,
                uuid,
            }),
            _ => Err(problems.join("; ")),
        }
    }
}

/// Decoding one entry refuses anything cn-agent would not report (a
/// hostile name such as `../x` or `A B` included).
impl<'de> Deserialize<'de> for AgentEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AgentEntry, D::Error> {
        AgentEntry::from_value(&Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Read a `server.agents` list leniently: the good entries, and a problem
/// for each entry that is not one (or for the list itself when it is not
/// a list).
pub fn read_agents(list: &Value) -> (Vec<AgentEntry>, Vec<AgentProblem>) {
    let Some(items) = list.as_array() else {
        let problem = AgentProblem {
            index: 0,
            problem: format!("is not a list: {}", clip(&list.to_string(), ECHO)),
        };
        return (Vec::new(), vec![problem]);
    };
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (index, v) in items.iter().enumerate() {
        match AgentEntry::from_value(v) {
            Ok(e) => entries.push(e),
            Err(problem) => problems.push(AgentProblem { index, problem }),
        }
    }
    (entries, problems)
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
    fn bad_entries_are_set_aside_bounded_with_their_problem() {
        let (list, problems) = read_agents(&json!([
            {"name": "vm-agent", "version": "1.0.0",
             "image_uuid": "fd5f189c-c26a-46a6-bd1a-b0e0150edf8f",
             "uuid": "04a3fd8b-da16-4f8d-a003-06dc52f0a1e3"},
            {"name": "net-agent", "uuid": "not-a-uuid"},
            {"name": "x".repeat(10 << 20)},
            {"name": "a\u{1b}[2J"},
            42,
            {"name": "cn-agent"}
        ]));
        assert_eq!(list.len(), 2);
        assert!(list[0].uuid.is_some());
        assert_eq!(list[1].name, "cn-agent");
        assert!(list[1].version.is_unknown());
        let at: Vec<usize> = problems.iter().map(|p| p.index).collect();
        assert_eq!(at, [1, 2, 3, 4]);
        assert!(problems[0].problem.starts_with("uuid \"not-a-uuid\""));
        assert!(problems[1].problem.len() < 400, "bounded");
        assert!(problems[1].problem.starts_with("name"));
        assert!(!problems[2].problem.contains('\u{1b}'));
        assert!(problems[3].problem.contains("not an object"));
        assert!(
            problems[0]
                .to_string()
                .starts_with("server.agents[1]: uuid")
        );
        // Serialized as cn-agent writes it.
        let v = serde_json::to_value(&list[0]).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 4);
        assert_eq!(
            serde_json::to_value(&list[1]).unwrap(),
            json!({"name": "cn-agent", "version": ""})
        );
    }

    #[test]
    fn a_hostile_name_is_refused_at_decode() {
        for name in ["../x", "A B", "", ".", "vm-agent/../../etc", "Vm-agent"] {
            let v = json!({"name": name, "version": "1.0.0"});
            let err = serde_json::from_value::<AgentEntry>(v.clone()).unwrap_err();
            assert!(
                err.to_string().contains("not a component name"),
                "{name}: {err}"
            );
            let (ok, problems) = read_agents(&json!([v]));
            assert!(ok.is_empty() && problems.len() == 1, "{name}");
        }
        assert!(
            read_agents(&json!({"name": "vm-agent"})).1[0]
                .problem
                .contains("not a list")
        );
    }
}
