//! Linux: the process table from `/proc`, and the sweep that ends every
//! process of a hook: stop them all (`SIGSTOP`, so none can fork or reap
//! while the table is read again), repeat until a pass finds no new one,
//! then `SIGKILL` them all.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

/// How many passes a sweep makes at most (each pass stops what it finds;
/// a stopped process forks no more, so two or three passes are the rule).
const MAX_PASSES: usize = 64;

/// How long a sweep waits for what it killed to die.
const DEATH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// One process as `/proc/<pid>/stat` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Proc {
    pub pid: i32,
    pub ppid: i32,
    /// Start time in clock ticks after boot: with the pid, it names one
    /// process for good (pids are reused, this pair is not).
    pub start: u64,
    /// Dead, waiting to be reaped: nothing to stop or kill.
    pub zombie: bool,
}

/// Parse `/proc/<pid>/stat`: `pid (comm) state ppid ... starttime ...`.
/// The command name may hold spaces and parentheses: the fields start
/// after its last `)`.
pub(super) fn parse_stat(text: &str) -> Option<Proc> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; field 4 (ppid) fields[1]; field 22
    // (starttime) fields[19].
    let state = fields.first()?;
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        zombie: matches!(*state, "Z" | "X" | "x"),
    })
}

/// Every process now (those that vanish while being read are skipped).
pub(super) fn table() -> Vec<Proc> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|t| parse_stat(&t))
        .collect()
}

/// `pid`'s start time, if it is alive (or a zombie).
pub(super) fn start_of(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text).map(|p| p.start)
}

/// Whether `pid` has children (dead or alive), where the kernel lists
/// them (`/proc/<pid>/task/<pid>/children`); `None` when it cannot tell.
pub(super) fn has_children(pid: i32) -> Option<bool> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    Some(!text.trim().is_empty())
}

/// The live descendants of `root` in `table` (not `root` itself).
pub(super) fn descendants(table: &[Proc], root: i32) -> BTreeSet<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let zombies: BTreeSet<i32> = table.iter().filter(|p| p.zombie).map(|p| p.pid).collect();
    let mut out = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for &c in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if c != root && out.insert(c) {
                stack.push(c);
            }
        }
    }
    out.retain(|p| !zombies.contains(p));
    out
}

/// Whether `environ` (NUL-separated `NAME=value` entries, as in
/// `/proc/<pid>/environ`) holds exactly `entry`.
pub(super) fn environ_has(environ: &[u8], entry: &str) -> bool {
    environ.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// The live processes whose environment (as they were started) holds
/// `entry`. Processes whose environment cannot be read are skipped.
pub(super) fn with_environ(table: &[Proc], entry: &str) -> BTreeSet<i32> {
    table
        .iter()
        .filter(|p| !p.zombie)
        .filter(|p| {
            fs::read(format!("/proc/{}/environ", p.pid)).is_ok_and(|e| environ_has(&e, entry))
        })
        .map(|p| p.pid)
        .collect()
}

/// Stop every process `select` picks from the table, pass after pass,
/// then kill them all. Never this process. Returns how many were killed.
pub(super) fn stop_and_kill(mut select: impl FnMut(&[Proc]) -> BTreeSet<i32>) -> usize {
    let me = std::process::id() as i32;
    // Each process stopped, with its start time.
    let mut stopped: BTreeMap<i32, u64> = BTreeMap::new();
    for _ in 0..MAX_PASSES {
        let table = table();
        let fresh: Vec<&Proc> = select(&table)
            .into_iter()
            .filter(|p| *p != me && *p > 1 && !stopped.contains_key(p))
            .filter_map(|pid| table.iter().find(|p| p.pid == pid))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            // SAFETY: kill only sends a signal, to a process the caller
            // identified as the hook's (a descendant of its supervisor,
            // or one carrying its marker).
            unsafe { libc::kill(p.pid, libc::SIGSTOP) };
            stopped.insert(p.pid, p.start);
        }
    }
    for &pid in stopped.keys() {
        // SAFETY: as above; these processes are stopped, so still the
        // same processes.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    wait_dead(&stopped);
    stopped.len()
}

/// Wait (a little: a killed process dies as soon as it is scheduled) until
/// none of `procs` (pid and start time) runs any more, so that nothing
/// killed is still about when the caller goes on.
fn wait_dead(procs: &BTreeMap<i32, u64>) {
    let deadline = std::time::Instant::now() + DEATH_GRACE;
    let running = |(pid, start): (&i32, &u64)| {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| parse_stat(&t))
            .is_some_and(|p| p.start == *start && !p.zombie)
    };
    while procs.iter().any(running) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_with_any_command_name() {
        let line = "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 107 0 0 0 0 0 0 0 20 0 1 0 987654 2293760 120 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Proc {
                pid: 4242,
                ppid: 17,
                start: 987654,
                zombie: false
            })
        );
        let z = "7 (sh) Z 1 7 7 0 -1 4 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
        assert!(parse_stat(z).unwrap().zombie);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn descendants_follow_parents_and_skip_zombies() {
        let p = |pid, ppid, zombie| Proc {
            pid,
            ppid,
            start: 1,
            zombie,
        };
        let t = vec![
            p(10, 1, false),
            p(11, 10, false),
            p(12, 11, false),
            p(13, 10, true),
            p(20, 1, false),
        ];
        assert_eq!(descendants(&t, 10), BTreeSet::from([11, 12]));
        assert!(descendants(&t, 20).is_empty());
    }

    #[test]
    fn environ_entries_match_whole() {
        let env = b"A=1\0AGENTSADM_HOOK_RUN=abc\0B=2\0";
        assert!(environ_has(env, "AGENTSADM_HOOK_RUN=abc"));
        assert!(!environ_has(env, "AGENTSADM_HOOK_RUN=ab"));
        assert!(!environ_has(b"", "A=1"));
    }

    #[test]
    fn this_process_is_in_the_table() {
        let me = std::process::id() as i32;
        assert!(table().iter().any(|p| p.pid == me));
        assert!(start_of(me).is_some());
    }
}
