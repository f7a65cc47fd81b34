//! The updates server: where `--latest` looks and images are looked up
//! (sdcadm's rule: `--updates-url`, else `UPDATES_URL`, else sdcadm's
//! `updatesServerUrl`; the channel `-C`, else SAPI's `update_channel`),
//! and how the plan's first line says so.

use agentsadm_types::component::ComponentName;
use anyhow::Context;

use agentsadm_api::ApiConfig;
use agentsadm_api::Apis;
use agentsadm_api::ImgapiClient;

use crate::args::{ChannelArgs, SourceArg};
use crate::settings::Settings;

/// What `--latest` takes, said the same way in `update --help`, the
/// README and the plan's first line.
pub const LATEST_RULE: &str =
    "--latest takes the newest image in the update channel of the updates server";
/// What `--latest --source dc` takes (air-gapped datacenters).
pub const LATEST_DC_RULE: &str =
    "--latest --source dc takes the newest image already in the datacenter IMGAPI";

/// The updates server a command uses, and where its URL and channel came
/// from (for the plan's first line and `avail`'s).
pub(crate) struct UpdatesServer {
    pub client: ImgapiClient,
    /// `--updates-url`, `UPDATES_URL` or the sdcadm configuration file.
    pub url_from: String,
    /// `-C`, `SAPI's update_channel`, or none (the server's default).
    pub channel_from: Option<&'static str>,
}

/// No updates server is configured where one is needed: said instead of
/// looking up a public name (which an air-gapped datacenter cannot).
#[derive(Debug, thiserror::Error)]
#[error(
    "no updates server is configured: pass --updates-url URL or set UPDATES_URL (on a headnode, agentsadm reads updatesServerUrl from sdcadm's configuration: /{conf} or /{defaults}); in an air-gapped datacenter use --source dc ({dc_rule})",
    dc_rule = LATEST_DC_RULE,
    conf = agentsadm_platform::sdcadm_config::SDCADM_CONF,
    defaults = agentsadm_platform::sdcadm_config::SDCADM_DEFAULTS
)]
pub struct NoUpdatesServer;

/// What a command wants from the updates server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// `--latest`: the updates server unless `--source dc`.
    Latest,
    /// An image to look up or list: the updates server only when asked
    /// for (`--source updates`, `-C`, `--updates-url` or `UPDATES_URL`).
    Lookup,
}

/// The updates server's URL and where it came from: `--updates-url`, else
/// `UPDATES_URL`, else sdcadm's `updatesServerUrl` on this headnode.
fn updates_url(here: &Settings, source: &ChannelArgs, sdcadm: bool) -> Option<(String, String)> {
    let given = |v: Option<String>| v.filter(|u| !u.trim().is_empty());
    if let Some(u) = given(source.updates_url.clone()) {
        return Some((u, "--updates-url".to_string()));
    }
    // `UPDATES_URL=` (set but empty) is no URL.
    if let Some(u) = here.updates_env.clone() {
        return Some((u, "UPDATES_URL".to_string()));
    }
    if !sdcadm {
        return None;
    }
    here.sdcadm_updates.as_ref().map(|(u, from)| {
        (
            u.clone(),
            format!("sdcadm's updatesServerUrl in {}", from.display()),
        )
    })
}

/// The updates server, when the command needs one (see [`Want`]), with
/// its channel: `-C`, else the `sdc` application's `update_channel` (as
/// sdcadm does), else the updates server's default. `None` with
/// `--source dc`, or for a lookup nobody pointed at an updates server.
pub(crate) async fn updates_client(
    here: &Settings,
    apis: &Apis,
    source: &ChannelArgs,
    want: Want,
) -> anyhow::Result<Option<UpdatesServer>> {
    let channel_flag = source.channel.clone().filter(|c| !c.trim().is_empty());
    if source.source == Some(SourceArg::Dc) {
        if channel_flag.is_some() || source.updates_url.is_some() {
            anyhow::bail!(
                "--source dc takes images only from the datacenter IMGAPI; drop -C and --updates-url, or use --source updates"
            );
        }
        return Ok(None);
    }
    let asked =
        want == Want::Latest || source.source == Some(SourceArg::Updates) || channel_flag.is_some();
    let Some((url, url_from)) = updates_url(here, source, asked) else {
        if asked {
            return Err(NoUpdatesServer.into());
        }
        return Ok(None);
    };
    let mut channel_from = channel_flag.as_ref().map(|_| "-C");
    let mut channel = channel_flag;
    if channel.is_none()
        && let Ok(Some(app)) = apis.sapi.sdc_application().await
    {
        channel = app
            .metadata
            .get("update_channel")
            .and_then(|v| v.as_str())
            .filter(|c| !c.trim().is_empty())
            .map(str::to_string);
        channel_from = channel.as_ref().map(|_| "SAPI's update_channel");
    }
    let client = ImgapiClient::new(&url, ApiConfig::default())
        .with_context(|| format!("invalid updates server URL {url:?} (from {url_from})"))?
        .with_channel(channel);
    Ok(Some(UpdatesServer {
        client,
        url_from,
        channel_from,
    }))
}

/// Where the images of a command come from, in words: `channel release
/// (SAPI's update_channel) of http://... (UPDATES_URL)`, or the
/// datacenter IMGAPI's URL.
pub(crate) fn source_words(updates: Option<&UpdatesServer>, dc: &ImgapiClient) -> String {
    match updates {
        Some(u) => {
            let channel = match (u.client.channel(), u.channel_from) {
                (Some(c), Some(from)) => format!("channel {c} ({from})"),
                (Some(c), None) => format!("channel {c}"),
                (None, _) => "the default channel".to_string(),
            };
            format!(
                "{channel} of the updates server {} ({})",
                u.client.base_url(),
                u.url_from
            )
        }
        None => format!("the datacenter IMGAPI {}", dc.base_url()),
    }
}

/// The plan's first line under `--latest`: the rule, then what it came to.
pub(crate) fn latest_target_line(
    components: &[ComponentName],
    updates: Option<&UpdatesServer>,
    dc: &ImgapiClient,
) -> String {
    let what = match components {
        [] => "each component".to_string(),
        many => many
            .iter()
            .map(ComponentName::as_str)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let rule = if updates.is_some() {
        LATEST_RULE
    } else {
        LATEST_DC_RULE
    };
    format!("{rule}: {what} from {}", source_words(updates, dc))
}
