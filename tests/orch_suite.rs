//! The orchestrator's integration tests, in one test binary (linking is the
//! slow part of CI, so one binary instead of one per file).
//!
//! (The planner's own scenarios, holds, half-set-up datacenters and plan
//! snapshots are crates/plan/tests/scenarios: `cargo test -p
//! agentsadm-plan`.)
//! - `adopt`: adoption planning (pure);
//! - `agentsadm_first`: servers whose agentsadm is missing, old or of
//!   unknown version get it first (a rollout on the strict simulator that
//!   bootstraps them and converges);
//! - `agentsadm_bootstrap`: the bootstrap script killed at each checkpoint
//!   and run again; the strict execute (old, current and no agentsadm);
//! - `agree`: `list` and `check` agree after every kind of run (sim);
//! - `bare_readoption`: an instance re-adopted bare outside any run is
//!   drift when agentsadm had recorded more for it (a step, `adopt`), its
//!   marks still count (the service's ledger), `check --fix` and an
//!   execute update write it back whole, and marks an earlier agentsadm
//!   kept once are copied by the next changing run (sim);
//! - `list`: the rows of `agentsadm list` and its summary (pure);
//! - `adopt_sapi`: adoption against SAPI's real re-create rules (sim);
//! - `cnapi_real`: the transport against a CNAPI and cn-agent that behave
//!   as the real ones (execute modes, Ur, removals, lost task results);
//! - `cost`: one SAPI write per server step and no lock read of its own,
//!   the records as they must stand (sim);
//! - `exec`: execution, outliers, stragglers and the lock on the fake
//!   datacenter, with a paused clock;
//! - `fence`: a plan changed between the prompt and execution is shown
//!   and asked about again, never executed unconfirmed, through the one
//!   run (`check --fix`, `adopt`, `server delete`); a held lock first;
//! - `gates`: health gates that overlap the next installs on a server,
//!   and what a failing one stops and reverts (fake, paused clock);
//! - `gz_together`: one server's execute-carried installs in one `gz
//!   install`, their installer gates overlapping (fake, paused clock);
//! - `history`: every run recorded (journal and SAPI), seen from another
//!   session, a run killed mid-rollout, plans scheduled from history;
//! - `readme_tasks`: every command of the README's operator tasks, as
//!   written, against the simulator;
//! - `records_kept`: after every kind of step (update, rerun, check
//!   --fix, revert, --ignore-holds) the SAPI instance keeps its server,
//!   image and marks, whatever the postinstall did (sim);
//! - `revert`: a revert returns the datacenter to the images before (no
//!   drift), is recorded and revertible; servers changed since are skipped;
//! - `halt`: the waves the plan shows and the run follows; a failure-budget
//!   halt puts intent back (sim);
//! - `marks_sim`: disable and hold end to end through the binary (sim);
//! - `interrupt`: Ctrl-C with servers in flight (task ids, waiting for
//!   them, a second interrupt), task ids of timed-out steps;
//! - `latest`: where `--latest` looks, printed on the plan's first line;
//! - `one_at_a_time`: two runs never both proceed however slow SAPI is; a
//!   run that loses its lock (deleted, broken) stops and says so; lock
//!   records that cannot be read or are dated in the future are reported;
//! - `outage`: an API that stops answering mid-rollout is named, fails no
//!   server, and a re-run converges; SIGTERM and SIGHUP end a rollout as
//!   Ctrl-C does;
//! - `outage_flags`: the outage pause's bounds as the operator's flags;
//! - `sim`: plan, execute and re-plan against the simulated datacenter, the
//!   CLI's exit statuses, two orchestrators started together;
//! - `runlog`: the bunyan log of every run, JSON error documents;
//! - `sdcadm_changes`: `list` shows sdcadm and gz-tools as sdcadm left
//!   them on the headnode, and which compute nodes only they can confirm;
//! - `sdcadm_lock`: a run holds sdcadm's lock on a headnode, and waits
//!   a bounded time or stops while sdcadm holds it (a forked holder);
//! - `shape`: agentsadm's, gz-tools' and sdcadm's services live outside
//!   `sdc`; an earlier version's records move, killed after any write;
//! - `small`: how a rollout too small for a median judges slow servers;
//! - `tables`: `list` and `avail` tables (`-H`, `-o`, `--sort`, `-q`);
//! - `plain_output`: no escape sequence in any command's output to a pipe;
//! - `terminal`: a rollout in tmux: the canary question seen, Ctrl-C and
//!   the end of input as "no".

#[path = "orch_suite/adopt.rs"]
mod adopt;
#[path = "orch_suite/adopt_sapi.rs"]
mod adopt_sapi;
#[path = "orch_suite/agentsadm_bootstrap.rs"]
mod agentsadm_bootstrap;
#[path = "orch_suite/agentsadm_first.rs"]
mod agentsadm_first;
#[path = "orch_suite/agree.rs"]
mod agree;
#[path = "orch_suite/bare_readoption.rs"]
mod bare_readoption;
#[path = "common/cli.rs"]
mod cli_common;
#[path = "orch_suite/cnapi_real.rs"]
mod cnapi_real;
#[path = "orch_suite/cost.rs"]
mod cost;
#[path = "orch_suite/exec.rs"]
mod exec;
#[path = "orch_suite/fence.rs"]
mod fence;
#[path = "common/flows.rs"]
mod flows_common;
#[path = "orch_suite/gates.rs"]
mod gates;
#[path = "orch_suite/gz_together.rs"]
mod gz_together;
#[path = "orch_suite/halt.rs"]
mod halt;
#[path = "orch_suite/history.rs"]
mod history;
#[path = "orch_suite/interrupt.rs"]
mod interrupt;
#[path = "orch_suite/latest.rs"]
mod latest;
#[path = "orch_suite/list.rs"]
mod list;
#[path = "orch_suite/marks_sim.rs"]
mod marks_sim;
#[path = "orch_suite/one_at_a_time.rs"]
mod one_at_a_time;
#[path = "orch_suite/outage.rs"]
mod outage;
#[path = "orch_suite/outage_flags.rs"]
mod outage_flags;
#[path = "orch_suite/plain_output.rs"]
mod plain_output;
#[path = "common/readme.rs"]
mod readme_common;
#[path = "orch_suite/readme_tasks.rs"]
mod readme_tasks;
#[path = "orch_suite/records_kept.rs"]
mod records_kept;
#[path = "orch_suite/revert.rs"]
mod revert;
#[path = "orch_suite/rollout.rs"]
mod rollout;
#[path = "orch_suite/runlog.rs"]
mod runlog;
#[path = "orch_suite/sdcadm_changes.rs"]
mod sdcadm_changes;
#[path = "orch_suite/sdcadm_lock.rs"]
mod sdcadm_lock;
#[path = "orch_suite/shape.rs"]
mod shape;
#[path = "orch_suite/sim.rs"]
mod sim;
#[path = "common/sim.rs"]
mod sim_common;
#[path = "orch_suite/small.rs"]
mod small;
#[path = "common/snapshot.rs"]
mod snapshot;
#[path = "orch_suite/snapshots.rs"]
mod snapshots;
#[path = "orch_suite/tables.rs"]
mod tables;
#[path = "orch_suite/terminal.rs"]
mod terminal;
#[path = "common/tools.rs"]
mod tools;
