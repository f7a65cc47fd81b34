//! `agentsadm installer build|import|release|state`: the helpers the
//! scripts in `installer/` and `make release` call (the USB key's image
//! directory, image import, the release image, the setup state). File
//! work runs off the runtime's threads.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};

use crate::CmdResult;
use crate::settings::Settings;
use agentsadm_flows::setup_state::SetupState;
use agentsadm_flows::usbkey;
use agentsadm_types::ids::ImageUuid;

fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

#[derive(Args, Debug)]
pub struct InstallerArgs {
    #[command(subcommand)]
    pub command: InstallerCommand,
}

#[derive(Subcommand, Debug)]
pub enum InstallerCommand {
    /// Build (or add to) the USB key's per-component image directory:
    /// `<DIR>/<name>/<uuid>.{manifest,file}` and `<DIR>/index.json`.
    Build {
        /// The directory (e.g. the stage's `extra/agents`).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Make this image its component's default (repeatable); otherwise
        /// the newest image of each component is.
        #[arg(long = "default", value_name = "UUID")]
        defaults: Vec<ImageUuid>,
        /// Also copy this agentsshar in and point `latest` at it, for old
        /// tooling that still reads `/usbkey/extra/agents/latest`.
        #[arg(long, value_name = "FILE")]
        shar: Option<PathBuf>,
        /// Image files (each with its `.manifest` next to it) or manifests.
        #[arg(value_name = "IMAGE")]
        images: Vec<PathBuf>,
    },
    /// Import the directory's default images (every image with --all) into
    /// the datacenter IMGAPI (headnode setup, once IMGAPI runs).
    Import {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        #[arg(long)]
        all: bool,
    },
    /// Pack an agentsadm binary as its IMGAPI image:
    /// `DIR/agentsadm-<version>.{tar.gz,manifest}` (what `make release` runs).
    Release(crate::release::ReleaseArgs),
    /// Read or update `/var/lib/setup.json` under a GZ root.
    State {
        /// The global zone root.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        #[command(subcommand)]
        command: StateCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Record states as seen (and the last one as current).
    Add {
        #[arg(required = true, value_name = "STATE")]
        states: Vec<String>,
    },
    /// Set `complete: true`.
    Complete,
    /// Exit 0 if the state was seen, 1 if not.
    Has {
        #[arg(value_name = "STATE")]
        state: String,
    },
    /// Print the setup state.
    Show,
}

pub async fn run(g: &Settings, a: InstallerArgs) -> CmdResult {
    let out = g.output();
    match a.command {
        InstallerCommand::Build {
            out: dir,
            defaults,
            shar,
            images,
        } => {
            let catalog = g.load_catalog()?;
            if images.is_empty() && defaults.is_empty() && shar.is_none() {
                bail!("name the image files to put in {}", dir.display());
            }
            let (report, dir) = tokio::task::spawn_blocking(move || {
                usbkey::build(&catalog, &dir, &images, &defaults, shar.as_deref()).map(|r| (r, dir))
            })
            .await??;
            if out.json {
                out.json(&report);
            } else {
                out.line(format!(
                    "{}: {} images added; defaults:",
                    dir.display(),
                    report.added.len()
                ));
                for (name, image) in &report.index.images {
                    out.line(format!("  {name} {image}"));
                }
                if let Some(l) = &report.latest {
                    out.line(format!("  latest -> {l}"));
                }
            }
            Ok(exit(0))
        }
        InstallerCommand::Import { dir, all } => {
            let catalog = g.load_catalog()?;
            let imgapi = match &g.imgapi_url {
                Some(u) => {
                    agentsadm_api::ImgapiClient::new(u, agentsadm_api::ApiConfig::default())?
                }
                None => g.apis()?.imgapi,
            };
            let report = usbkey::import(&catalog, &imgapi, &dir, all).await?;
            if out.json {
                out.json(&report);
            } else {
                out.line(format!(
                    "Imported {} images into {} ({} already there).",
                    report.imported.len(),
                    imgapi.base_url(),
                    report.present.len()
                ));
            }
            Ok(exit(0))
        }
        InstallerCommand::Release(r) => {
            let g = g.global.clone();
            tokio::task::spawn_blocking(move || crate::release::run(&g, r)).await?
        }
        InstallerCommand::State { root, command } => {
            let show = matches!(command, StateCommand::Show);
            let (state, has) = tokio::task::spawn_blocking(move || state(&root, command)).await??;
            if let Some(has) = has {
                return Ok(exit(if has { 0 } else { 1 }));
            }
            if show {
                if out.json {
                    out.json(&state.to_json());
                } else {
                    out.line(format!(
                        "complete: {}\nseen: {}",
                        state.is_complete(),
                        state.seen().join(", ")
                    ));
                }
            }
            Ok(exit(0))
        }
    }
}

/// `installer state ...` on the files (blocking: run off the runtime):
/// the state, and for `has` whether it was seen.
fn state(
    root: &std::path::Path,
    command: StateCommand,
) -> anyhow::Result<(SetupState, Option<bool>)> {
    let mut state = SetupState::load(root)?;
    let mut has = None;
    match command {
        StateCommand::Add { states } => {
            for s in &states {
                state.add(s);
            }
            state.save()?;
        }
        StateCommand::Complete => {
            state.mark_complete();
            state.save()?;
        }
        StateCommand::Has { state: s } => has = Some(state.has(&s)),
        StateCommand::Show => {}
    }
    Ok((state, has))
}
