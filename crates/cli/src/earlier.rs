//! What earlier runs on this machine did, read back from their run logs:
//! `server delete HOSTNAME` run again after it finished finds the server
//! no longer in CNAPI by that name, and the log of the run that deleted it
//! says which UUID it was (SAPI instances do not record hostnames).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use agentsadm_types::ids::ServerUuid;

/// How many of the newest `server delete` logs are read.
const LOGS_READ: usize = 200;
/// A log larger than this is not a `server delete` run's (they are small).
const MAX_LOG_BYTES: u64 = 16 << 20;

/// The server an earlier `server delete` logged in `dir` deleted from
/// CNAPI under `hostname` (newest first), and that log's path.
pub(crate) fn deleted_server(dir: &Path, hostname: &str) -> Option<(ServerUuid, PathBuf)> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-server-delete.log"))
        })
        .collect();
    // Names start with the UTC time: newest last.
    logs.sort();
    logs.into_iter()
        .rev()
        .take(LOGS_READ)
        .find_map(|log| deleted_in(&log, hostname).map(|u| (u, log)))
}

/// The server `log` records deleting from CNAPI under `hostname`.
fn deleted_in(log: &Path, hostname: &str) -> Option<ServerUuid> {
    let meta = std::fs::metadata(log).ok()?;
    if !meta.is_file() || meta.len() > MAX_LOG_BYTES {
        return None;
    }
    let file = std::fs::File::open(log).ok()?;
    std::io::BufReader::new(file).lines().find_map(|line| {
        let line = line.ok()?;
        if !line.contains("\"component\":\"records\"") {
            return None;
        }
        let rec: serde_json::Value = serde_json::from_str(&line).ok()?;
        let change = &rec["change"];
        let done = matches!(
            rec["result"]["status"].as_str(),
            Some("done" | "already-done")
        );
        (change["record"] == "server"
            && change["call"] == "delete"
            && change["hostname"] == hostname
            && done)
            .then(|| change["server"].as_str()?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_newest_delete_of_a_hostname() {
        let d = tempfile::tempdir().unwrap();
        let rec = |server: &str, host: &str, status: &str| {
            format!(
                r#"{{"component":"records","call":"CNAPI DELETE /servers/{server}","change":{{"record":"server","server":"{server}","hostname":"{host}","call":"delete","in_cnapi":true}},"result":{{"status":"{status}"}},"msg":"x"}}"#
            )
        };
        let a = "44454c4c-4800-1034-804a-b2c04f354d31";
        let b = "44454c4c-4800-1034-804a-b2c04f354d32";
        std::fs::write(
            d.path().join("20260101T000000Z-1-server-delete.log"),
            format!("{}\n", rec(a, "cn7", "done")),
        )
        .unwrap();
        std::fs::write(
            d.path().join("20260102T000000Z-2-server-delete.log"),
            format!("{}\n{}\n", rec(b, "cn7", "failed"), rec(b, "cn8", "done")),
        )
        .unwrap();
        std::fs::write(
            d.path().join("20260103T000000Z-3-update.log"),
            rec(b, "cn7", "done"),
        )
        .unwrap();
        let (u, log) = deleted_server(d.path(), "cn7").unwrap();
        assert_eq!(
            u.to_string(),
            a,
            "the failed delete and other commands do not count"
        );
        assert!(log.ends_with("20260101T000000Z-1-server-delete.log"));
        assert_eq!(deleted_server(d.path(), "cn8").unwrap().0.to_string(), b);
        assert!(deleted_server(d.path(), "cn9").is_none());
    }
}
