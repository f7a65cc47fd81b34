//! The step a run or a component failed at, as the result document names
//! it (`GzFailure.step`): one enum so the names on the wire are spelled in
//! one place.

use std::fmt;

use super::fetch::FetchError;
use super::package::Hook;

/// Where a failure happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The server could not be identified (sysinfo, `--server-uuid`).
    Sysinfo,
    /// The server lock.
    Lock,
    /// Recovery of an interrupted transaction.
    Recover,
    /// API URLs and clients.
    Config,
    /// Which image or component: names, manifests, the catalog, placement.
    Resolve,
    /// A step of fetching the image (`resolve`, `download`, `verify`,
    /// `unpack`), as the fetcher names it.
    Fetch(&'static str),
    /// The staged package does not look like the image it claims to be.
    Validate,
    /// The instance UUID file.
    Instance,
    /// The transaction journal.
    Journal,
    /// Moving files, trees and links in or out.
    Swap,
    /// A lifecycle hook (`hook:postinstall`, ...).
    Hook(Hook),
    /// SMF manifests and services.
    Smf,
    /// SAPI adoption or instance removal.
    Sapi,
    /// Handing cn-agent's own replacement to agentsadm-install.
    Handoff,
    /// `gz rollback` found nothing to restore, or could not stage it.
    Rollback,
    /// The health gate: a service of the new version did not come up (or
    /// stay up); the transaction rolled back.
    Unhealthy,
    /// `--expect-current`: the server's installed image is not the one the
    /// plan expected (changed since the plan).
    ExpectCurrent,
}

impl Step {
    /// The name in results and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Step::Sysinfo => "sysinfo",
            Step::Lock => "lock",
            Step::Recover => "recover",
            Step::Config => "config",
            Step::Resolve => "resolve",
            Step::Fetch(step) => step,
            Step::Validate => "validate",
            Step::Instance => "instance",
            Step::Journal => "journal",
            Step::Swap => "swap",
            Step::Hook(hook) => hook.step(),
            Step::Smf => "smf",
            Step::Sapi => "sapi",
            Step::Handoff => "handoff",
            Step::Rollback => "rollback",
            Step::Unhealthy => "unhealthy",
            Step::ExpectCurrent => "expect-current",
        }
    }
}

impl From<&FetchError> for Step {
    fn from(e: &FetchError) -> Step {
        Step::Fetch(e.step())
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
