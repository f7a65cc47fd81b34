//! `package.json` of an apm package: name, version, lifecycle scripts and
//! bins, validated so that nothing in it can name a path outside the package.

use agentsadm_types::component::{ComponentName, ComponentNameError};
use std::collections::BTreeMap;
use std::path::{Component as PathComponent, Path};

use serde::Deserialize;

/// The lifecycle hooks apm runs (docs/triton/agent-install.md §2.1); no
/// others exist (smartlogin's `postactivate` is never run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    Preinstall,
    Postinstall,
    Preuninstall,
    Postuninstall,
}

impl Hook {
    pub fn as_str(&self) -> &'static str {
        match self {
            Hook::Preinstall => "preinstall",
            Hook::Postinstall => "postinstall",
            Hook::Preuninstall => "preuninstall",
            Hook::Postuninstall => "postuninstall",
        }
    }

    /// The failure step name used in results (`hook:postinstall`).
    pub fn step(&self) -> &'static str {
        match self {
            Hook::Preinstall => "hook:preinstall",
            Hook::Postinstall => "hook:postinstall",
            Hook::Preuninstall => "hook:preuninstall",
            Hook::Postuninstall => "hook:postuninstall",
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed, validated `package.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageJson {
    /// The package (and `node_modules` directory) name.
    pub name: ComponentName,
    pub version: String,
    /// Hook name -> script path relative to the package directory.
    pub scripts: BTreeMap<String, String>,
    /// Bin name -> path relative to the package directory.
    pub bin: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawPackage {
    name: Option<String>,
    version: Option<String>,
    #[serde(default)]
    scripts: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    bin: Option<serde_json::Value>,
}

/// Why a `package.json` was refused.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("package.json is not valid JSON")]
    Json {
        #[source]
        err: serde_json::Error,
    },
    #[error("package.json has no {field}")]
    Missing { field: &'static str },
    #[error("package.json name is refused")]
    Name {
        #[source]
        err: ComponentNameError,
    },
    #[error("package.json {field} {value:?} is refused: {reason}")]
    Bad {
        field: String,
        value: String,
        reason: &'static str,
    },
}

impl PackageJson {
    pub fn parse(bytes: &[u8]) -> Result<PackageJson, PackageError> {
        let raw: RawPackage =
            serde_json::from_slice(bytes).map_err(|err| PackageError::Json { err })?;
        let name = raw
            .name
            .filter(|n| !n.is_empty())
            .ok_or(PackageError::Missing { field: "name" })?;
        let name = ComponentName::new(name).map_err(|err| PackageError::Name { err })?;
        let version = raw.version.unwrap_or_default();
        let mut scripts = BTreeMap::new();
        for (hook, value) in raw.scripts {
            if let Some(s) = value.as_str() {
                scripts.insert(hook, s.to_string());
            }
        }
        for hook in [
            Hook::Preinstall,
            Hook::Postinstall,
            Hook::Preuninstall,
            Hook::Postuninstall,
        ] {
            if let Some(s) = scripts.get(hook.as_str())
                && !s.is_empty()
            {
                check_relative(&format!("scripts.{}", hook.as_str()), s)?;
            }
        }
        let mut bin = BTreeMap::new();
        match raw.bin {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(path)) => {
                bin.insert(name.to_string(), path);
            }
            Some(serde_json::Value::Object(map)) => {
                for (k, v) in map {
                    if let Some(p) = v.as_str() {
                        bin.insert(k, p.to_string());
                    }
                }
            }
            Some(_) => {
                return Err(PackageError::Bad {
                    field: "bin".into(),
                    value: String::new(),
                    reason: "it must be a string or an object",
                });
            }
        }
        for (k, v) in &bin {
            if k.is_empty() || k.contains('/') || k == "." || k == ".." {
                return Err(PackageError::Bad {
                    field: "bin".into(),
                    value: k.clone(),
                    reason: "a bin name must be a plain file name",
                });
            }
            check_relative(&format!("bin.{k}"), v)?;
        }
        Ok(PackageJson {
            name,
            version,
            scripts,
            bin,
        })
    }

    /// Read `<dir>/package.json`.
    pub fn read(dir: &Path) -> Result<Option<PackageJson>, PackageError> {
        match crate::fsutil::read_small(dir.join("package.json")) {
            Ok(b) => PackageJson::parse(&b).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PackageError::Json {
                err: serde_json::Error::io(e),
            }),
        }
    }

    /// The script for a hook, if the package has one.
    pub fn script(&self, hook: Hook) -> Option<&str> {
        self.scripts
            .get(hook.as_str())
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// A path inside the package: relative, without `..`.
fn check_relative(field: &str, value: &str) -> Result<(), PackageError> {
    let bad = |reason| PackageError::Bad {
        field: field.to_string(),
        value: value.to_string(),
        reason,
    };
    let p = Path::new(value);
    if p.is_absolute() {
        return Err(bad("it must be a path inside the package"));
    }
    if p.components()
        .any(|c| matches!(c, PathComponent::ParentDir))
    {
        return Err(bad("it must not contain '..'"));
    }
    if !p
        .components()
        .any(|c| matches!(c, PathComponent::Normal(_)))
    {
        return Err(bad("it is empty"));
    }
    Ok(())
}

/// Strip a leading `./` (apm links `../lib/node_modules/<name>/<path>`).
pub fn clean_relative(path: &str) -> String {
    Path::new(path)
        .components()
        .filter_map(|c| match c {
            PathComponent::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let p = PackageJson::parse(
            br#"{"name":"vm-agent","version":"1.0.0-x","scripts":{"postinstall":"npm/postinstall.sh","test":"x"},"bin":{"vm-agent":"./bin/vm-agent.js"}}"#,
        )
        .unwrap();
        assert_eq!(p.script(Hook::Postinstall), Some("npm/postinstall.sh"));
        assert_eq!(p.script(Hook::Preinstall), None);
        assert_eq!(clean_relative(&p.bin["vm-agent"]), "bin/vm-agent.js");
        let single = PackageJson::parse(br#"{"name":"x","bin":"cli.js"}"#).unwrap();
        assert_eq!(single.bin["x"], "cli.js");
        for bad in [
            &br#"{"name":"x","scripts":{"postinstall":"../../evil"}}"#[..],
            br#"{"name":"x","scripts":{"postinstall":"/bin/evil"}}"#,
            br#"{"name":"x","bin":{"../x":"a"}}"#,
            br#"{"version":"1"}"#,
            b"garbage",
        ] {
            assert!(PackageJson::parse(bad).is_err());
        }
    }

    #[test]
    fn a_name_that_is_not_a_component_name_is_refused() {
        for name in ["../x", "A B", ".", "vm-agent/x", "-rf"] {
            let json = serde_json::json!({"name": name, "version": "1.0.0"}).to_string();
            let err = PackageJson::parse(json.as_bytes()).unwrap_err();
            assert!(matches!(err, PackageError::Name { .. }), "{name}: {err:?}");
            let chain = agentsadm_types::error::error_chain(&err);
            assert!(chain.contains("is not a component name"), "{chain}");
        }
    }
}
