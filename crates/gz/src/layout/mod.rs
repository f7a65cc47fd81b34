//! How a server's components sit on disk, behind one trait, so every
//! layout runs the same transaction ([`super::txn`]: journal, swap, undo,
//! commit, recovery) and the same session code.
//!
//! What differs between layouts, and nothing else:
//! - where things live: the root every recorded path is relative to, and
//!   agentsadm's state (lock, journal, staging, kept previous versions);
//! - where a component's tree and instance UUID file are, and how the
//!   installed version is read back;
//! - how a resolved image becomes a staged version (a full unpack, or just
//!   the files the layout keeps);
//! - whether hooks and SMF run (a global zone), and what else an install
//!   records there (sdcadm's config);
//! - the form of the kept previous version ([`KeptForm`]);
//! - how the `server.agents` report is read.
//!
//! Layouts:
//! - [`triton::TritonGz`]: a Triton global zone, `/` or a rooted directory
//!   (docs/triton/agent-install.md §0, [`super::paths`]);
//! - [`mockcloud::MockcloudGz`]: one server of a mockcloud tree,
//!   `<root>/servers/<uuid>/agents/<package>/{image_uuid,package.json,
//!   instance_uuid}` (docs/triton/agent-install.md §4), no hooks, no SMF:
//!   a handful of files per install, for thousands of simulated servers.
//!
//! The methods that read files are blocking; async code calls them
//! through [`agentsadm_platform::blocking`].

pub mod mockcloud;
pub mod triton;

use std::fmt;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use agentsadm_api::ImgapiClient;
use agentsadm_api::remote::AgentsReport;
use agentsadm_types::catalog::Catalog;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ServerUuid;

use super::fetch::FetchError;

use super::fetch::FetchOptions;

use super::fetch::ResolvedImage;
use super::kinds::CurrentError;
use super::kinds::Footprint;
use super::kinds::LayoutError;
use super::kinds::StagedVersion;
use super::paths::GzPaths;
use super::step::Step;

/// Which layout a run uses (the operator's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LayoutKind {
    /// A Triton global zone (`/` or a rooted directory).
    #[default]
    Smartdc,
    /// A mockcloud tree: `<root>/servers/<uuid>/agents/<name>/...`.
    Mockcloud,
}

/// The form in which the version an upgrade replaced is kept, in
/// `<state>/previous/<component>/`, for `gz rollback`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptForm {
    /// The transaction's aside directory as it was (`tree/`, `root/`, the SMF
    /// manifests) plus `footprint.json`: everything a Triton component
    /// occupied.
    Whole,
    /// The old tree itself (mockcloud: `previous/<name>/image_uuid`, ...),
    /// its footprint read back from it.
    TreeOnly,
}

/// A kept previous version: its footprint and where its files are.
#[derive(Clone, Debug)]
pub struct KeptVersion {
    pub footprint: Footprint,
    /// The kept tree (for `footprint.tree`).
    pub tree: Option<PathBuf>,
    /// The kept overlay files, mirroring their destinations.
    pub root: Option<PathBuf>,
}

/// What staging an image needs from the run.
#[derive(Clone, Copy, Debug)]
pub struct StageRequest<'a> {
    pub component: &'a Component,
    pub image: &'a ResolvedImage,
    pub imgapi: Option<&'a ImgapiClient>,
    /// The run's download options (retries, timeouts); a layout adds its
    /// download cache and unpack rules.
    pub fetch: &'a FetchOptions,
    /// `staging/<txn>`: the staged files go under it.
    pub txn_dir: &'a Path,
    pub headnode: bool,
    /// `AGENTSADM_TEST_CRASH_AT`.
    pub crash_at: Option<&'a str>,
    /// `AGENTSADM_TEST_UNPACK_LIMIT`: unpacking fails with "disk full"
    /// after this many bytes.
    pub unpack_limit: Option<u64>,
}

/// Why an image could not be staged (nothing has changed yet).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Mockcloud(#[from] mockcloud::MockcloudError),
}

impl StageError {
    pub fn step(&self) -> Step {
        match self {
            StageError::Fetch(e) => Step::from(e),
            StageError::Layout(_) => Step::Validate,
            StageError::Mockcloud(e) => e.step(),
        }
    }
}

/// One way of laying out a server's components (module docs).
pub trait Layout: Send + Sync + fmt::Debug {
    fn kind(&self) -> LayoutKind;

    /// The root every recorded path is relative to, and agentsadm's state.
    fn paths(&self) -> &GzPaths;

    /// Whether lifecycle hooks and SMF run here (a global zone).
    fn runs_services(&self) -> bool;

    /// How the version an upgrade replaced is kept.
    fn kept_form(&self) -> KeptForm;

    /// The component's instance UUID file, root-relative. Inside the
    /// component's tree it travels with the tree (the transaction writes it
    /// into the staged copy).
    fn instance_rel(&self, component: &Component) -> String;

    /// What is installed now for `component`, if anything. Blocking.
    fn current(&self, component: &Component) -> Result<Option<Footprint>, CurrentError>;

    /// The version the last upgrade of `component` replaced, if one is
    /// kept. Blocking.
    fn kept(&self, component: &Component) -> Option<KeptVersion>;

    /// Fetch and check `request.image` and stage it under
    /// `request.txn_dir` (the tree as `<txn>/new/<package>`).
    fn stage<'a>(
        &'a self,
        request: StageRequest<'a>,
    ) -> BoxFuture<'a, Result<StagedVersion, StageError>>;

    /// The `server.agents` report. Blocking.
    fn report(&self, catalog: &Catalog, server: ServerUuid) -> AgentsReport;

    /// Anything else an install of `component` records here; returns notes
    /// for the result. Blocking.
    fn after_install(&self, _component: &Component, _server: ServerUuid) -> Vec<String> {
        Vec::new()
    }

    /// Bring what cn-agent reads as `server.agents` in line with what is
    /// installed, for the components it would not see otherwise
    /// ([`super::registration`]); returns what could not be done. Blocking;
    /// the caller holds the server lock. A layout whose every component
    /// already sits where cn-agent looks has nothing to do.
    fn register(&self, _catalog: &Catalog) -> Vec<String> {
        Vec::new()
    }
}
