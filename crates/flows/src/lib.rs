//! Operator flows beyond update: drift checks and their repair, server
//! delete and factory-reset cleanup, and the helpers the setup scripts in
//! `installer/` call.
//!
//! - [`drift`]: the pure drift finder (findings with a stable `kind` and a
//!   proposed fix); [`repair`]: the pure repair planner.
//! - [`check`]: `agentsadm check` as a library call: gather intent, reality
//!   and (with `--live`) the servers' own reports, find drift, and with
//!   `--fix` carry out the repairs through the orchestrator.
//! - [`cleanup`]: `agentsadm server delete|factory-reset`.
//! - [`selfupdate`]: `agentsadm self-update` (agentsadm's own copy on the
//!   headnode, and the one new servers get).
//! - Setup: [`usbkey`] (the USB key's per-component image directory and
//!   its import into IMGAPI), [`headnode`] (`agentsadm adopt --local`),
//!   [`setup_state`] (`/var/lib/setup.json`); the scripts that use them
//!   are in `installer/`.

pub mod check;
pub mod cleanup;
pub mod drift;
pub mod headnode;
pub mod ondisk;
pub mod repair;
pub mod selfupdate;
pub mod setup_state;
pub mod usbkey;
