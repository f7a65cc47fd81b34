//! The flows suite (one test binary, to keep link time down):
//!
//! - `drift`: the drift finder and repair planner without I/O (every
//!   finding kind, the text as a snapshot, convergence on the example datacenter);
//! - `check`: `check` / `check --fix` against the simulator, one test per
//!   finding kind (make the drift, find it, fix it, check again), and the
//!   command line's exit statuses and `--json`;
//! - `fix_rollout`: `check --fix` in waves: failure budget, canaries, rack
//!   limit, never marlin-agent in bulk;
//! - `records`: an instance a server reports is never deleted (its params
//!   are corrected, or it is left to the operator); a malformed
//!   `server.agents` sets one server aside, not the datacenter;
//! - `server`: `server delete|factory-reset` against the simulator;
//! - `setup`: the `installer/` scripts end to end (USB key build, headnode
//!   with no API, adoption, import, a compute node from empty through
//!   `agentsetup.sh`), and shellcheck;
//! - `usbkey`: the USB key's image directory and its defaults;
//! - `selfupdate`: agentsadm's release image and `self-update` (latest,
//!   rollback, refusals, SIGKILL at each step).

#[path = "common/cli.rs"]
mod cli_common;
#[path = "common/flows.rs"]
mod flows_common;
#[path = "common/gz.rs"]
mod gz_common;
#[path = "common/rel.rs"]
mod rel_common;
#[path = "common/sim.rs"]
mod sim_common;
#[path = "common/snapshot.rs"]
mod snapshot;
#[path = "common/tools.rs"]
mod tools_common;

#[path = "flows_suite/check.rs"]
mod check;
#[path = "flows_suite/drift.rs"]
mod drift;
#[path = "flows_suite/fix_rollout.rs"]
mod fix_rollout;
#[path = "flows_suite/records.rs"]
mod records;
#[path = "flows_suite/selfupdate.rs"]
mod selfupdate;
#[path = "flows_suite/server.rs"]
mod server;
#[path = "flows_suite/setup.rs"]
mod setup;
#[path = "flows_suite/usbkey.rs"]
mod usbkey;
