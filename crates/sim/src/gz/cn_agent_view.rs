//! What the real cn-agent's `refreshAgents` reads from a Triton GZ and posts
//! as `server.agents` (docs/triton/agent-install.md §3.6), so the
//! simulator's cn-agent forgets what the real one forgets.
//!
//! - sysinfo's `SDC Agents`: every `package.json` at depth 2 under
//!   `node_modules`, as `{name, version}` from the file (not the
//!   directory's name);
//! - then every entry of `node_modules` (dot entries too: `readdir` lists
//!   them) must have a readable `image_uuid`, or the whole refresh fails and
//!   nothing is posted;
//! - an agent whose name equals a directory's gets that directory's
//!   `image_uuid` and, when `etc/<dir>` exists, its instance UUID.
//!
//! Components installed outside `node_modules` are not in it, whatever
//! agentsadm's own report says.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use agentsadm_api::cnapi::AgentEntry;
use agentsadm_gz::paths::GzPaths;

/// The entries, or the first path whose reading failed the refresh (the
/// simulator's cn-agent; also the reader of the refresh stress
/// measurements).
pub fn read(root: &Path) -> Result<Vec<AgentEntry>, (PathBuf, io::Error)> {
    let paths = GzPaths::new(root);
    let dir = paths.node_modules();
    let mut names: Vec<String> = match fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()
            .map_err(|e| (dir.clone(), e))?,
        Err(e) => return Err((dir, e)),
    };
    names.sort();
    let mut agents: Vec<AgentEntry> = names
        .iter()
        .filter_map(|n| sdc_agent(&dir.join(n).join("package.json")))
        .collect();
    for name in &names {
        let file = dir.join(name).join("image_uuid");
        let image = fs::read_to_string(&file).map_err(|e| (file.clone(), e))?;
        let instance = fs::read_to_string(paths.etc_dir().join(name)).ok();
        for a in agents.iter_mut().filter(|a| &a.name == name) {
            a.image_uuid = image.trim().parse().ok();
            a.uuid = instance.as_deref().and_then(|u| u.trim().parse().ok());
        }
    }
    agents.sort();
    Ok(agents)
}

/// One `SDC Agents` element: `{name, version}` of a readable package.json.
/// (The real cn-agent posts any name and version it reads; the agents'
/// entries here are typed, so a package whose name is not a component
/// name, or whose version is not one, is left out.)
fn sdc_agent(package: &Path) -> Option<AgentEntry> {
    let value: serde_json::Value = serde_json::from_slice(&fs::read(package).ok()?).ok()?;
    Some(AgentEntry {
        name: value.get("name")?.as_str()?.parse().ok()?,
        version: value
            .get("version")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .parse()
            .ok()?,
        image_uuid: None,
        uuid: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(root: &Path, name: &str, image: Option<&str>) {
        let dir = GzPaths::new(root).node_modules().join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("package.json"),
            format!(r#"{{"name":"{name}","version":"1.0.0"}}"#),
        )
        .unwrap();
        if let Some(i) = image {
            fs::write(dir.join("image_uuid"), format!("{i}\n")).unwrap();
        }
    }

    #[test]
    fn only_node_modules_is_seen_and_one_bad_entry_loses_all() {
        let tmp = tempfile::tempdir().unwrap();
        let img = "a8fe4d9c-4d53-4b4d-8e3b-6f1b2b1f6a01";
        agent(tmp.path(), "vm-agent", Some(img));
        // agentsadm's own copy, outside node_modules: not reported.
        let bin = tmp.path().join("opt/smartdc/agentsadm/bin");
        fs::create_dir_all(&bin).unwrap();
        let seen = read(tmp.path()).unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].name, "vm-agent");
        assert_eq!(seen[0].image_uuid.unwrap().to_string(), img);

        agent(tmp.path(), "broken", None);
        let (path, _) = read(tmp.path()).unwrap_err();
        assert!(path.ends_with("broken/image_uuid"), "{}", path.display());
    }
}
