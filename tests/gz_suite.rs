//! The GZ installer's integration tests, in one test binary (linking is
//! the slow part of CI, so one binary instead of one per file).
//!
//! - `install`: every kind, upgrade hooks and instance UUIDs, rollback, remove, report;
//! - `kinds`: what each component kind stages;
//! - `keep_off`: a disabled component stays disabled across upgrade,
//!   reinstall, rollback and a SIGKILL mid-postinstall (issue 25);
//! - `agentsadm_kind`: agentsadm's own component (its directory, report,
//!   upgrade by rename with the binary always there, takeover of a bare copy);
//! - `bounded_reads`: a FIFO, device link, outside link or huge file at
//!   each file the installer reads: no hang, lock freed, nothing outside changed;
//! - `bad_input`: each bad input refused with the cause named, nothing changed;
//! - `crash`: killed at every checkpoint, recovered to old or new;
//! - `concurrency`: ordering, parallel-safe overlap, the server lock;
//! - `sapi_cnapi`: adoption and the server.agents report;
//! - `mockcloud`, `setup`, `handoff`: the other layouts and flows;
//! - `fetch`: local image files verified and unpacked, a corrupt one refused;
//! - `unpack`: the unpacker's rules, one example each;
//! - `unpack_props`: the unpacker never writes outside staging;
//! - `hostile`: hostile images (issue 12), one test per class, each
//!   refused with the root and a sentinel outside it unchanged.
//! - `health`: the health gate rolls an unhealthy build back; `--expect-current`;
//!   `gz health`.
//! - `own_manifests`: a manifest the package's postinstall did not write
//!   fails the install (agentsadm renders none); what it wrote is imported;
//! - `real_fixtures`: every real agent's SMF manifest and package.json read;
//! - `symlinks`: links in a package never followed by chmod;
//! - `claims`: bins, SMF manifests and services of other components refused;
//! - `escapes`: nothing a hook starts (setsid, setpgid, double fork)
//!   outlives it, after a failure, a success or a SIGKILL and recovery;
//! - `txn_hostile`: hooks that delete staging, incomplete rollbacks, pending
//!   journals in the report, atomic-write leftovers, kept copies checked;
//! - `written_manifests`: what a postinstall writes into apm's SMF
//!   directory is checked before import and journaled; another's refused;
//! - `modes_bins`: modes normalised (no world-write, sticky or unallowed
//!   setuid); bins that dangle or shadow a system command refused;
//! - `roots`: relative roots, no hooks for a rooted GZ on SmartOS, fetch flags.

#[path = "common/gz.rs"]
mod gz_common;
#[path = "common/tools.rs"]
mod tools_common;

#[path = "gz_suite/agentsadm_kind.rs"]
mod agentsadm_kind;
#[path = "gz_suite/bad_input.rs"]
mod bad_input;
#[path = "gz_suite/bounded_reads.rs"]
mod bounded_reads;
#[path = "gz_suite/claims.rs"]
mod claims;
#[path = "gz_suite/concurrency.rs"]
mod concurrency;
#[path = "gz_suite/crash.rs"]
mod crash;
#[path = "gz_suite/escapes.rs"]
mod escapes;
#[path = "gz_suite/fetch.rs"]
mod fetch;
#[path = "gz_suite/handoff.rs"]
mod handoff;
#[path = "gz_suite/health.rs"]
mod health;
#[path = "gz_suite/hostile.rs"]
mod hostile;
#[path = "gz_suite/install.rs"]
mod install;
#[path = "gz_suite/keep_off.rs"]
mod keep_off;
#[path = "gz_suite/kinds.rs"]
mod kinds;
#[path = "gz_suite/mockcloud.rs"]
mod mockcloud;
#[path = "gz_suite/modes_bins.rs"]
mod modes_bins;
#[path = "gz_suite/names.rs"]
mod names;
#[path = "gz_suite/own_manifests.rs"]
mod own_manifests;
#[path = "gz_suite/real_fixtures.rs"]
mod real_fixtures;
#[path = "gz_suite/roots.rs"]
mod roots;
#[path = "gz_suite/sapi_cnapi.rs"]
mod sapi_cnapi;
#[path = "gz_suite/setup.rs"]
mod setup;
#[path = "gz_suite/shar.rs"]
mod shar;
#[path = "gz_suite/shar_reader.rs"]
mod shar_reader;
#[path = "gz_suite/symlinks.rs"]
mod symlinks;
#[path = "gz_suite/txn_hostile.rs"]
mod txn_hostile;
#[path = "gz_suite/unpack.rs"]
mod unpack;
#[path = "gz_suite/unpack_props.rs"]
mod unpack_props;
#[path = "gz_suite/written_manifests.rs"]
mod written_manifests;
