//! The updates server named in the headnode's sdcadm configuration, which
//! sdcadm loads as `/opt/smartdc/sdcadm/etc/defaults.json` with
//! `/var/sdcadm/sdcadm.conf` (JSON) merged over it; the key is
//! `updatesServerUrl`. agentsadm's `--latest` uses the same server, so an
//! operator's `sdcadm` and `agentsadm` agree on where "newest" comes from.
//! Off a headnode neither file exists and nothing is configured.

use std::path::{Path, PathBuf};

/// sdcadm's own settings, read after its defaults (its values win).
pub const SDCADM_CONF: &str = "var/sdcadm/sdcadm.conf";
/// sdcadm's shipped defaults.
pub const SDCADM_DEFAULTS: &str = "opt/smartdc/sdcadm/etc/defaults.json";

/// `updatesServerUrl` from sdcadm's configuration under `root` (`/` on a
/// headnode), and the file it came from. A file that is missing, not
/// JSON, or without a non-empty string there is passed over, as sdcadm
/// passes over a missing `sdcadm.conf`.
pub fn sdcadm_updates_url(root: &Path) -> Option<(String, PathBuf)> {
    [SDCADM_CONF, SDCADM_DEFAULTS].into_iter().find_map(|rel| {
        let path = root.join(rel);
        // A configuration file is a few hundred bytes; refuse to slurp
        // anything that is not one (nor to wait on a FIFO).
        let text = crate::read_bounded_text(&path, 1 << 20).ok()?;
        let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
        let url = doc.get("updatesServerUrl")?.as_str()?.trim();
        (!url.is_empty()).then(|| (url.to_string(), path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn sdcadm_conf_wins_over_the_defaults() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(sdcadm_updates_url(d.path()), None, "not a headnode");
        write(
            d.path(),
            SDCADM_DEFAULTS,
            r#"{"updatesServerUrl": "https://updates.tritondatacenter.com"}"#,
        );
        let (url, from) = sdcadm_updates_url(d.path()).unwrap();
        assert_eq!(url, "https://updates.tritondatacenter.com");
        assert!(from.ends_with("defaults.json"));
        write(
            d.path(),
            SDCADM_CONF,
            r#"{"updatesServerUrl": "http://updates.example.internal"}"#,
        );
        let (url, from) = sdcadm_updates_url(d.path()).unwrap();
        assert_eq!(url, "http://updates.example.internal");
        assert!(from.ends_with("sdcadm.conf"));
        // A conf without the key, or not JSON, leaves the defaults' value.
        write(d.path(), SDCADM_CONF, r#"{"serverUuid": "x"}"#);
        assert!(
            sdcadm_updates_url(d.path())
                .unwrap()
                .1
                .ends_with("defaults.json")
        );
        write(d.path(), SDCADM_CONF, "not json");
        assert!(
            sdcadm_updates_url(d.path())
                .unwrap()
                .1
                .ends_with("defaults.json")
        );
    }
}
