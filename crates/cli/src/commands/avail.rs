//! `agentsadm avail`: the images of each component in the datacenter
//! IMGAPI (or an updates server's channel), with how many servers run each
//! and which is the service default.

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use crate::args::ChannelArgs;

use crate::updates::{Want, source_words, updates_client};
use std::process::ExitCode;

use crate::CmdResult;
use crate::settings::Settings;
use agentsadm_orchestrate::gather;
use agentsadm_orchestrate::images;
use agentsadm_orchestrate::images::AvailableImage;
use agentsadm_types::catalog::Component;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::output::short_uuid;
use agentsadm_types::output::table_with;
use agentsadm_types::output::to_the_second;
use agentsadm_types::version::VersionKey;

#[derive(Args, Debug)]
pub struct AvailArgs {
    /// Only these components (default: all).
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<ComponentName>,
    #[command(flatten)]
    pub source: ChannelArgs,
    /// Also list images older than the oldest one in use.
    #[arg(long)]
    pub all_images: bool,
    #[command(flatten)]
    pub table: crate::args::TableArgs,
}

pub async fn run(g: &Settings, a: AvailArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let components: Vec<&Component> = if a.components.is_empty() {
        catalog.iter().collect()
    } else {
        a.components
            .iter()
            .map(|c| catalog.require(c))
            .collect::<Result<_, _>>()?
    };
    let apis = g.apis()?;
    let (intent, reality) = gather::gather(&apis, &catalog).await?;
    let updates = updates_client(g, &apis, &a.source, Want::Lookup).await?;
    let client = updates.as_ref().map(|u| &u.client).unwrap_or(&apis.imgapi);
    let from = source_words(updates.as_ref(), &apis.imgapi);
    let rows = images::available(client, &components)
        .await
        .with_context(|| format!("cannot list images from {}", client.base_url()))?;
    // Servers running each image, and each service's default.
    let mut running: BTreeMap<ImageUuid, usize> = BTreeMap::new();
    for s in reality.servers.values() {
        for i in s.components.values() {
            if let Some(img) = i.image {
                *running.entry(img).or_default() += 1;
            }
        }
    }
    let defaults: BTreeMap<&str, ImageUuid> = intent
        .services
        .iter()
        .filter_map(|(n, s)| s.default_image.map(|i| (n.as_str(), i)))
        .collect();
    // Unless --all-images: from the oldest image in use on.
    let mut oldest: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for r in &rows {
        if running.contains_key(&r.image) || defaults.get(r.component.as_str()) == Some(&r.image) {
            let e = oldest
                .entry(r.component.as_str())
                .or_insert(r.published_at.clone());
            if r.published_at < *e {
                *e = r.published_at.clone();
            }
        }
    }
    let newest_running = newest_running(&rows, &running);
    let shown: Vec<_> = rows
        .iter()
        .filter(|r| {
            a.all_images
                || match oldest.get(r.component.as_str()) {
                    Some(o) => r.published_at >= *o,
                    None => true,
                }
        })
        .map(|r| {
            json!({
                "component": r.component,
                "image": r.image,
                "version": r.version,
                "published_at": r.published_at,
                "servers": running.get(&r.image).copied().unwrap_or(0),
                "default": defaults.get(r.component.as_str()) == Some(&r.image),
                "newer": newest_running
                    .get(r.component.as_str())
                    .is_some_and(|n| later(r, n)),
                "source": from,
            })
        })
        .collect();
    if out.json {
        out.json(&shown);
        return Ok(ExitCode::SUCCESS);
    }
    let cells: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            vec![
                r["component"].as_str().unwrap_or("").to_string(),
                r["version"].as_str().unwrap_or("").to_string(),
                short_uuid(&r["image"].as_str().unwrap_or(""), 8),
                to_the_second(r["published_at"].as_str().unwrap_or("-")),
                r["servers"].to_string(),
                [("default", &r["default"]), ("newer", &r["newer"])]
                    .iter()
                    .filter(|(_, v)| v.as_bool() == Some(true))
                    .map(|(k, _)| *k)
                    .collect::<Vec<_>>()
                    .join(","),
            ]
        })
        .collect();
    // Images by component, oldest first (as listed), unless -s says.
    let text = table_with(
        &[
            "COMPONENT",
            "VERSION",
            "IMAGE",
            "PUBLISHED",
            "SERVERS",
            "NOTE",
        ],
        &cells,
        &a.table.options(&[]),
    )
    .map_err(anyhow::Error::msg)?;
    if !a.table.no_header {
        out.line(format!("Images in {from}:"));
    }
    out.line(text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// The newest image each component runs anywhere: an image later than it
/// is an upgrade to consider (NOTE "newer", as sdcadm avail lists what is
/// newer than what runs).
fn newest_running<'r>(
    rows: &'r [AvailableImage],
    running: &BTreeMap<ImageUuid, usize>,
) -> BTreeMap<&'r str, &'r AvailableImage> {
    let mut newest: BTreeMap<&str, &AvailableImage> = BTreeMap::new();
    for r in rows.iter().filter(|r| running.contains_key(&r.image)) {
        let e = newest.entry(r.component.as_str()).or_insert(r);
        if later(r, e) {
            *e = r;
        }
    }
    newest
}

/// Whether image `a` is later than `b`: by version (semver, then build
/// stamp) when both parse, else by publication time.
fn later(a: &AvailableImage, b: &AvailableImage) -> bool {
    match (VersionKey::of(&a.version), VersionKey::of(&b.version)) {
        (Some(x), Some(y)) => x > y,
        _ => a.published_at > b.published_at,
    }
}
