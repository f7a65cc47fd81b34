//! `agentsadm list`: per server and component, what is installed against
//! what SAPI intends, with a state; `--summary` counts servers per image.

use agentsadm_types::component::ComponentName;
use std::collections::BTreeMap;

use clap::Args;
use serde::Serialize;

use crate::args::{ServersArg, TableArgs};

use std::process::ExitCode;

use crate::CmdResult;
use crate::settings::Settings;
use agentsadm_flows::drift::FindingKind;
use agentsadm_flows::ondisk;
use agentsadm_orchestrate::Intent;
use agentsadm_orchestrate::Reality;
use agentsadm_orchestrate::gather;
use agentsadm_plan::intent::{InstanceIntent, InstanceLink};
use agentsadm_plan::reality::Installed;
use agentsadm_plan::resolve_servers;
use agentsadm_types::ids::ImageUuid;
use agentsadm_types::ids::InstanceUuid;
use agentsadm_types::ids::ServerUuid;
use agentsadm_types::output::Output;
use agentsadm_types::output::short;
use agentsadm_types::output::table;
use agentsadm_types::output::table_with;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only these components.
    #[arg(value_name = "COMPONENT")]
    pub components: Vec<ComponentName>,
    #[command(flatten)]
    pub servers: ServersArg,
    /// One line per component and installed image, with how many servers
    /// run it and in which state (for fleets too large to list per server).
    #[arg(long)]
    pub summary: bool,
    /// A map of the fleet by rack (CNAPI rack_identifier), a cell per
    /// server: at its intended images, on others, missing one, held,
    /// disabled, or not running.
    #[arg(long, conflicts_with = "summary")]
    pub racks: bool,
    #[command(flatten)]
    pub table: TableArgs,
}

/// One row of `agentsadm list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListRow {
    pub server: ServerUuid,
    pub hostname: String,
    pub component: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceUuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_image: Option<ImageUuid>,
    /// `ok`, or the kind `agentsadm check` reports for the same drift:
    /// `wrong-image` (intent names another image), `installed-without-instance`,
    /// `missing-install` (intent without an install), `unmanaged-component`;
    /// `quarantined` when its `server.agents` cannot be used (`check` says why).
    pub state: &'static str,
    /// The server's CNAPI status (`running`, `unknown`, ...): what a
    /// server that is down reports may be out of date.
    pub server_status: String,
    /// `agentsadm disable`: who, when, why (SAPI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<agentsadm_plan::Mark>,
    /// `agentsadm hold` (on the server, or datacenter-wide).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<agentsadm_plan::Mark>,
    /// Where the row does not come from `server.agents` as is: read from
    /// this headnode's disk after sdcadm changed it, or unconfirmed
    /// ([`agentsadm_flows::ondisk`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ListRow {
    /// The STATE cell: the state, then the operator's marks.
    fn state_cell(&self) -> String {
        let marks: Vec<&str> = [
            self.disabled.as_ref().map(|_| "disabled"),
            self.held.as_ref().map(|_| "held"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if marks.is_empty() {
            self.state.to_string()
        } else {
            format!("{} ({})", self.state, marks.join(", "))
        }
    }
}

/// A component's state in `list`, in `check`'s words and by `check`'s
/// rules (one vocabulary, one verdict): the image is judged against the
/// instance's own `params.image_uuid`, never the service default; an
/// instance the server reports but without params (as agentsshar-era
/// postinstalls leave them) is no drift.
fn component_state(
    managed: bool,
    installed: Option<&Installed>,
    instance: Option<&InstanceIntent>,
) -> &'static str {
    match (installed, instance) {
        _ if !managed => FindingKind::UnmanagedComponent.as_str(),
        (Some(i), Some(inst)) => match inst.image {
            Some(target) if i.image != Some(target) => FindingKind::WrongImage.as_str(),
            _ if inst.has_params()
                || inst.link == InstanceLink::Reported && inst.image.is_none() =>
            {
                "ok"
            }
            _ => FindingKind::InstanceWithoutParams.as_str(),
        },
        (Some(_), None) => FindingKind::InstalledWithoutInstance.as_str(),
        (None, _) => FindingKind::MissingInstall.as_str(),
    }
}

/// The rows of `agentsadm list` (pure).
pub fn list_rows(
    intent: &Intent,
    reality: &Reality,
    servers: &[ServerUuid],
    components: &[ComponentName],
) -> Vec<ListRow> {
    let mut rows = Vec::new();
    for uuid in servers {
        let Some(s) = reality.get(uuid) else {
            continue;
        };
        let mut names: Vec<&ComponentName> = s.components.keys().collect();
        if let Some(per) = intent.instances.get(uuid) {
            names.extend(per.keys());
        }
        names.sort();
        names.dedup();
        if s.is_quarantined() && names.is_empty() {
            rows.push(ListRow {
                server: *uuid,
                hostname: s.hostname.clone(),
                component: "-".to_string(),
                version: None,
                image: None,
                instance: None,
                intended_image: None,
                state: "quarantined",
                server_status: s.status.clone(),
                disabled: None,
                held: None,
                note: None,
            });
        }
        for name in names {
            if !components.is_empty() && !components.contains(name) {
                continue;
            }
            let installed = s.components.get(name);
            let inst = intent.instance(uuid, name);
            let intended = intent.intended_image(uuid, name);
            // What a quarantined server reports cannot be trusted: 'agentsadm
            // check' names the field (the same first entry both show).
            let state = if s.is_quarantined() {
                "quarantined"
            } else {
                component_state(intent.is_managed(name), installed, inst)
            };
            rows.push(ListRow {
                server: *uuid,
                hostname: s.hostname.clone(),
                component: name.to_string(),
                version: installed.map(|i| i.version.to_string()),
                image: installed.and_then(|i| i.image),
                instance: installed.and_then(|i| i.instance).or(inst.map(|i| i.uuid)),
                intended_image: intended,
                state,
                server_status: s.status.clone(),
                disabled: intent.disabled(uuid, name).cloned(),
                held: intent.holds.get(uuid, name).map(|(_, m)| m.clone()),
                note: None,
            });
        }
    }
    rows
}

/// One line of `agentsadm list --summary`: the servers running one
/// image of one component, counted by state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListSummaryRow {
    pub component: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageUuid>,
    pub servers: usize,
    pub states: BTreeMap<&'static str, usize>,
    /// The operator's marks among those servers: `held`, `disabled`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub marks: BTreeMap<&'static str, usize>,
    /// The component's datacenter-wide hold (new servers included), if
    /// it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_datacenter_wide: Option<agentsadm_plan::Mark>,
    /// It is the image SAPI names for the component (what new servers
    /// get).
    pub default: bool,
}

/// Group `list` rows by (component, version, image) (pure); `intent`
/// names the datacenter-wide holds and the service defaults.
pub fn list_summary(rows: &[ListRow], intent: &Intent) -> Vec<ListSummaryRow> {
    let holds = &intent.holds;
    let mut groups: BTreeMap<(&str, Option<&str>, Option<ImageUuid>), ListSummaryRow> =
        BTreeMap::new();
    for r in rows {
        let g = groups
            .entry((r.component.as_str(), r.version.as_deref(), r.image))
            .or_insert_with(|| ListSummaryRow {
                component: r.component.clone(),
                version: r.version.clone(),
                image: r.image,
                servers: 0,
                states: BTreeMap::new(),
                marks: BTreeMap::new(),
                held_datacenter_wide: holds.services.get(r.component.as_str()).cloned(),
                default: r.image.is_some()
                    && intent
                        .services
                        .get(r.component.as_str())
                        .and_then(|s| s.default_image)
                        == r.image,
            });
        g.servers += 1;
        *g.states.entry(r.state).or_default() += 1;
        for (mark, on) in [
            ("held", r.held.is_some()),
            ("disabled", r.disabled.is_some()),
        ] {
            if on {
                *g.marks.entry(mark).or_default() += 1;
            }
        }
    }
    groups.into_values().collect()
}

pub async fn run(g: &Settings, a: ListArgs) -> CmdResult {
    let out = g.output();
    let catalog = g.load_catalog()?;
    let mut components = Vec::new();
    for c in &a.components {
        components.push(catalog.require(c)?.name.clone());
    }
    let apis = g.apis()?;
    let mut answers = gather::fetch(&apis).await?;
    // What sdcadm changed behind agentsadm's registrations, from this
    // headnode's own disk.
    let disk = ondisk::overlay_headnode(&mut answers.servers, &catalog, &apis).await;
    let reality = Reality::from_servers(&catalog, &answers.servers);
    let intent = Intent::build(&catalog, &answers.services, &answers.instances, &reality);
    let servers: Vec<ServerUuid> = if a.servers.servers.is_empty() {
        reality.servers.keys().copied().collect()
    } else {
        resolve_servers(&reality, &a.servers.servers)
            .map_err(|e| sort_hint(e.into(), &a.servers.servers))?
    };
    let mut rows = list_rows(&intent, &reality, &servers, &components);
    let notes = disk_notes(&mut rows, &disk);
    rows.sort_by(|x, y| {
        (x.hostname.as_str(), x.component.as_str())
            .cmp(&(y.hostname.as_str(), y.component.as_str()))
    });
    if out.quiet && !out.json && !a.summary {
        // `list -q`: the hostnames, one a line, for `for h in $(...)`.
        let mut hosts: Vec<&str> = rows.iter().map(|r| r.hostname.as_str()).collect();
        hosts.dedup();
        for h in hosts {
            println!("{h}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.summary {
        print_list_summary(&out, servers.len(), &rows, &intent);
        return Ok(ExitCode::SUCCESS);
    }
    if a.racks && !out.json {
        let rack = |u: &ServerUuid| reality.servers.get(u).and_then(|s| s.rack.clone());
        out.line(fleet_map(&rows, &servers, rack).trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    if out.json {
        out.json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.hostname.clone(),
                r.server_status.clone(),
                r.component.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                r.image.map(|i| short(&i)).unwrap_or_else(|| "-".into()),
                r.intended_image
                    .map(|i| short(&i))
                    .unwrap_or_else(|| "-".into()),
                r.state_cell(),
            ]
        })
        .collect();
    let text = table_with(
        &[
            "HOSTNAME",
            "SERVER",
            "COMPONENT",
            "VERSION",
            "IMAGE",
            "INTENDED",
            "STATE",
        ],
        &cells,
        &a.table.options(&["hostname", "component"]),
    )
    .map_err(anyhow::Error::msg)?;
    out.line(text.trim_end());
    for n in notes {
        out.warn(n);
    }
    Ok(ExitCode::SUCCESS)
}

/// `list --racks`: each server's cell from its rows (the components
/// listed): drift first, then the operator's marks.
pub fn fleet_map(
    rows: &[ListRow],
    servers: &[ServerUuid],
    rack: impl Fn(&ServerUuid) -> Option<String>,
) -> String {
    use crate::pictures::racks::{Cell, render};
    let mut racks: BTreeMap<Option<String>, Vec<Cell>> = BTreeMap::new();
    for u in servers {
        let mine: Vec<&ListRow> = rows.iter().filter(|r| r.server == *u).collect();
        let Some(first) = mine.first() else { continue };
        let any = |state: &str| mine.iter().any(|r| r.state == state);
        let glyph = if first.server_status != "running" || any("quarantined") {
            '?'
        } else if any("wrong-image") {
            'o'
        } else if any("missing-install") {
            '-'
        } else if any("installed-without-instance") || any("unmanaged-component") {
            '+'
        } else if mine.iter().any(|r| r.held.is_some()) {
            'H'
        } else if mine.iter().any(|r| r.disabled.is_some()) {
            'D'
        } else {
            '='
        };
        racks.entry(rack(u)).or_default().push(Cell {
            hostname: first.hostname.clone(),
            glyph,
        });
    }
    render(
        "By rack (a cell per server, by hostname):",
        racks,
        '=',
        &[
            ('=', "as intended"),
            ('o', "another image"),
            ('-', "missing"),
            ('+', "not in SAPI"),
            ('H', "held"),
            ('D', "disabled"),
            ('?', "not running or unreadable"),
        ],
    )
}

/// Mark the rows [`ondisk::overlay`] changed or left unconfirmed, and the
/// text said under the table about them.
fn disk_notes(rows: &mut [ListRow], disk: &ondisk::Overlay) -> Vec<String> {
    let mut notes = Vec::new();
    let mut unconfirmed = Vec::new();
    for r in rows.iter_mut() {
        if let Some(c) = disk.change(r.server, &r.component) {
            let was = c.registered.as_ref().map_or_else(
                || "nothing".to_string(),
                |a| {
                    let image = a.image_uuid.map(|i| short(&i)).unwrap_or("-".into());
                    format!(
                        "{} ({image})",
                        if a.version.is_empty() {
                            "unknown"
                        } else {
                            a.version.as_str()
                        }
                    )
                },
            );
            let note = format!(
                "read from this headnode's disk: sdcadm changed it after agentsadm registered {was}, which CNAPI still shows"
            );
            notes.push(format!("{} {}: {note}", r.hostname, r.component));
            r.note = Some(note);
        } else if disk.unconfirmed.contains(&r.server)
            && disk.changes.iter().any(|c| c.component == *r.component)
        {
            r.note = Some(format!(
                "unconfirmed: sdcadm replaced {} on the headnode, and may have replaced it here; 'agentsadm check --live -s {}' asks the server",
                r.component, r.hostname
            ));
            unconfirmed.push(r.hostname.clone());
        }
    }
    if !unconfirmed.is_empty() {
        unconfirmed.dedup();
        let n = unconfirmed.len();
        notes.push(format!(
            "gz-tools on {n} compute {} ({}) is unconfirmed: sdcadm replaced the headnode's, and its update-gz-tools may have replaced theirs, which only they can tell ('agentsadm check --live gz-tools' asks each)",
            if n == 1 { "node" } else { "nodes" },
            agentsadm_types::output::clip(&unconfirmed.join(", "), 200)
        ));
    }
    notes
}

/// The columns of `list`, lower case (for `-o` and `--sort`).
const LIST_COLUMNS: [&str; 7] = [
    "hostname",
    "server",
    "component",
    "version",
    "image",
    "intended",
    "state",
];

/// `list -s hostname`: sdcadm's `-s` sorts, ours selects servers. When a
/// name that is not a server is a column, say so.
fn sort_hint(e: anyhow::Error, names: &[String]) -> anyhow::Error {
    match names
        .iter()
        .map(|n| n.trim())
        .find(|n| LIST_COLUMNS.contains(&n.to_ascii_lowercase().as_str()))
    {
        Some(column) => anyhow::anyhow!(
            "{}; -s selects servers here, and {column} is a column: to sort by it, use --sort {column} (sdcadm's -s sorts)",
            agentsadm_types::error::error_chain(&*e)
        ),
        None => e,
    }
}

fn print_list_summary(out: &Output, servers: usize, rows: &[ListRow], intent: &Intent) {
    let summary = list_summary(rows, intent);
    if out.json {
        out.json(&summary);
        return;
    }
    let states = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Each component's servers, for its images' shares of them.
    let mut per_component: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &summary {
        *per_component.entry(r.component.as_str()).or_default() += r.servers;
    }
    let cells: Vec<Vec<String>> = summary
        .iter()
        .map(|r| {
            vec![
                r.component.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                r.image.map(|i| short(&i)).unwrap_or_else(|| "-".into()),
                r.servers.to_string(),
                mix_bar(r.servers, per_component[r.component.as_str()], r.default),
                if r.marks.is_empty() {
                    states(&r.states)
                } else {
                    format!("{} ({})", states(&r.states), states(&r.marks))
                },
            ]
        })
        .collect();
    out.line(
        table(
            &["COMPONENT", "VERSION", "IMAGE", "SERVERS", "MIX", "STATES"],
            &cells,
        )
        .trim_end(),
    );
    out.line("MIX: the image's share of the component's servers; * the image SAPI names (new servers get it).");
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows {
        *totals.entry(r.state).or_default() += 1;
    }
    out.line(format!(
        "{}, {} installed components ({}).",
        agentsadm_types::output::plural(servers, "server", "servers"),
        rows.len(),
        states(&totals)
    ));
    // A datacenter-wide hold also holds the servers set up later: say it
    // once, with who, when and why.
    let mut held: Vec<String> = Vec::new();
    for r in &summary {
        if let Some(m) = &r.held_datacenter_wide
            && !held
                .iter()
                .any(|h| h.starts_with(&format!("{} ", r.component)))
        {
            held.push(format!("{} ({})", r.component, m.describe()));
        }
    }
    if !held.is_empty() {
        out.line(format!(
            "Held datacenter-wide, new servers included: {}.",
            held.join("; ")
        ));
    }
    let mut down: Vec<String> = rows
        .iter()
        .filter(|r| r.server_status != "running")
        .map(|r| format!("{} ({})", r.hostname, r.server_status))
        .collect();
    down.dedup();
    if !down.is_empty() {
        out.line(format!(
            "Not running (CNAPI status), so what they report may be out of date: {}.",
            down.join(", ")
        ));
    }
}

/// `[######----]*`: `servers` of `of` as ten cells, `*` when the image is
/// the service default. A share under a tenth still shows one cell.
fn mix_bar(servers: usize, of: usize, default: bool) -> String {
    const CELLS: usize = 10;
    let filled = (servers * CELLS + of / 2)
        .checked_div(of)
        .map_or(0, |n| n.clamp(usize::from(servers > 0), CELLS));
    format!(
        "[{}{}]{}",
        "#".repeat(filled),
        "-".repeat(CELLS - filled),
        if default { "*" } else { " " }
    )
}
