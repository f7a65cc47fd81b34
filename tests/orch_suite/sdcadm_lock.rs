//! sdcadm's lock on a headnode (issue 29): a changing run holds it for its
//! whole length, as sdcadm's qlocker takes it (a POSIX write lock over the
//! whole file), so sdcadm cannot take it meanwhile; while sdcadm holds it,
//! a run waits a bounded time, then stops naming the holder and changes
//! nothing. The other side is a real lock in another process (forked).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use agentsadm_api::sapi::{Update, UpdateAction, object};
use agentsadm_orchestrate::adopt::{AdoptPlan, AdoptPlanner};
use agentsadm_orchestrate::lock::{LockError, SdcadmLockError, SdcadmLockOptions};
use agentsadm_orchestrate::run::{RunError, RunOutcome, RunSettings};
use agentsadm_sim::SimDc;

use crate::flows_common::{Script, instance_of, server, sim_run};

/// A forked process holding `path` as qlocker does, until dropped.
struct Holder {
    pid: libc::pid_t,
    go: libc::c_int,
}

fn whole_file(kind: libc::c_int) -> libc::flock {
    // SAFETY: plain data; all-zero is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

fn pipe() -> (libc::c_int, libc::c_int) {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: a valid two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

impl Holder {
    /// Fork a process that opens `path`, waits for the write lock
    /// (`F_SETLKW`, as qlocker), says so, and holds it until told.
    fn start(path: &Path) -> Holder {
        let c = c_path(path);
        let (ready_r, ready_w) = pipe();
        let (go_r, go_w) = pipe();
        let fl = whole_file(libc::F_WRLCK);
        // SAFETY: the child calls only async-signal-safe functions (open,
        // fcntl, write, read, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            unsafe {
                let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644);
                if fd < 0 || libc::fcntl(fd, libc::F_SETLKW, &fl) != 0 {
                    libc::_exit(3);
                }
                libc::write(ready_w, b"1".as_ptr().cast(), 1);
                let mut b = 0u8;
                libc::read(go_r, (&mut b as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        let mut b = 0u8;
        // SAFETY: valid descriptors and buffer.
        unsafe {
            libc::close(ready_w);
            libc::close(go_r);
            assert_eq!(
                libc::read(ready_r, (&mut b as *mut u8).cast(), 1),
                1,
                "the holder took the lock"
            );
            libc::close(ready_r);
        }
        Holder { pid, go: go_w }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our pipe end and our child.
        unsafe {
            libc::write(self.go, b"1".as_ptr().cast(), 1);
            libc::close(self.go);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// Whether another process could take the lock right now (as sdcadm
/// would try): forks one that tries `F_SETLK` and exits 0 if it got it,
/// 1 if someone holds it.
fn another_process_can_lock(path: &Path) -> bool {
    let c = c_path(path);
    let fl = whole_file(libc::F_WRLCK);
    // SAFETY: as in Holder::start.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644);
            if fd < 0 {
                libc::_exit(3);
            }
            libc::_exit(if libc::fcntl(fd, libc::F_SETLK, &fl) == 0 {
                0
            } else {
                1
            });
        }
    }
    let mut status = 0;
    // SAFETY: our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "probe ended by a signal");
    match libc::WEXITSTATUS(status) {
        0 => true,
        1 => false,
        n => panic!("probe could not open the lock file ({n})"),
    }
}

fn adopted(p: &AdoptPlan) -> Vec<String> {
    p.instances
        .iter()
        .map(|i| format!("{} {}", i.hostname, i.component))
        .collect()
}

/// A datacenter with one instance to adopt (cn0001's cmon-agent).
async fn dc_to_adopt() -> SimDc {
    let dc = SimDc::start(agentsadm_sim::SimConfig::default().servers(2).populate(
        agentsadm_sim::SeedSpec {
            agents_without_params: Vec::new(),
            ..Default::default()
        },
    ))
    .await
    .expect("simulator starts");
    let inst = instance_of(&dc, server(&dc, "cn0001"), "cmon-agent")
        .await
        .unwrap();
    let strip = Update {
        action: Some(UpdateAction::Delete),
        params: Some(object([
            ("server_uuid", serde_json::Value::Null),
            ("image_uuid", serde_json::Value::Null),
        ])),
        metadata: None,
    };
    dc.apis()
        .sapi
        .update_instance(inst.uuid, &strip)
        .await
        .unwrap();
    dc
}

async fn adopt(
    dc: &SimDc,
    settings: &RunSettings,
    lock: &SdcadmLockOptions,
    operator: &Script<AdoptPlan>,
) -> Result<RunOutcome<AdoptPlan>, RunError<agentsadm_orchestrate::adopt::AdoptError>> {
    let apis = dc.apis();
    let planner = AdoptPlanner {
        apis: &apis,
        catalog: dc.catalog(),
        servers: Vec::new(),
    };
    let mut run = sim_run(&apis, dc.catalog(), settings, "adopt");
    run.lock.sdcadm = Some(lock.clone());
    run.go(&planner, operator, std::future::pending()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stops_while_sdcadm_holds_its_lock_and_names_it() {
    let dc = dc_to_adopt().await;
    let dir = tempfile::tempdir().unwrap();
    let lock = SdcadmLockOptions {
        path: dir.path().join("sdcadm.lock"),
        wait: Duration::from_millis(400),
    };
    let yes = RunSettings {
        yes: true,
        ..RunSettings::default()
    };
    let operator = Script::new(&[], false, adopted);
    let holder = Holder::start(&lock.path);
    let before = dc.mutation_count();
    let started = std::time::Instant::now();
    let err = adopt(&dc, &yes, &lock, &operator).await.unwrap_err();
    let waited = started.elapsed();
    match &err {
        RunError::Lock(LockError::Sdcadm(SdcadmLockError::Held { holder: who, .. })) => {
            assert!(who.contains(&format!("pid {}", holder.pid)), "{who}");
        }
        other => panic!("not sdcadm's lock: {other:?}"),
    }
    let text = agentsadm_types::error::error_chain(&err);
    assert!(
        text.contains("sdcadm holds its lock") && text.contains("sdcadm.lock"),
        "{text}"
    );
    assert!(waited >= lock.wait, "gave up after {waited:?}");
    assert_eq!(
        dc.mutation_count(),
        before,
        "nothing written while sdcadm held it"
    );

    // Released within the wait: the run waits for it and goes on.
    let lock = SdcadmLockOptions {
        wait: Duration::from_secs(20),
        ..lock
    };
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let outcome = adopt(&dc, &yes, &lock, &operator).await.unwrap();
    release.join().unwrap();
    assert!(
        matches!(outcome, RunOutcome::Executed { .. }),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdcadm_cannot_take_its_lock_while_a_run_holds_it() {
    let dc = dc_to_adopt().await;
    let dir = tempfile::tempdir().unwrap();
    let lock = SdcadmLockOptions {
        path: dir.path().join("sdcadm.lock"),
        wait: Duration::from_secs(5),
    };
    // While the question is on screen (the run holds its locks), another
    // process tries sdcadm's: 1 = could not.
    let seen = Arc::new(AtomicI32::new(-1));
    let probe = {
        let (seen, path) = (seen.clone(), lock.path.clone());
        async move {
            let free = tokio::task::spawn_blocking(move || another_process_can_lock(&path))
                .await
                .unwrap();
            seen.store(i32::from(!free), Ordering::SeqCst);
        }
    };
    let operator = Script::new(&[true], true, adopted).while_asking(probe);
    let outcome = adopt(&dc, &RunSettings::default(), &lock, &operator)
        .await
        .unwrap();
    assert!(
        matches!(outcome, RunOutcome::Executed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "sdcadm took its lock in the middle of the run"
    );
    assert!(
        another_process_can_lock(&lock.path),
        "released when the run ended"
    );
}
