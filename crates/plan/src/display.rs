//! The plan as operators read it: sections with `+ - ~` lines sorted by
//! server then component, skips with their reasons, warnings, and a summary
//! line. Large fleets are shown grouped (servers with identical changes on
//! one line) so a 2000-server plan stays readable; `--json` has every detail.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use crate::Action;

use crate::Gate;

use crate::ImageRef;

use crate::IntentChange;

use crate::Operation;
use crate::Plan;

use crate::Skip;

use crate::HealthFlags;
use crate::RecordChange;
use crate::Rollout;
use crate::SkipReason;
use agentsadm_types::output::{plural, short};

/// A plan rendered for humans.
pub struct PlanDisplay<'a> {
    plan: &'a Plan,
    max_servers: usize,
    /// `--min-healthy` / `--health-timeout`, for the gate lines (`None`:
    /// each server's default).
    health: Option<HealthFlags>,
}

impl Plan {
    /// Every server listed.
    pub fn display(&self) -> PlanDisplay<'_> {
        PlanDisplay {
            plan: self,
            max_servers: usize::MAX,
            health: None,
        }
    }

    /// Servers listed one by one up to `max_servers`, grouped beyond.
    pub fn display_compact(&self, max_servers: usize) -> PlanDisplay<'_> {
        PlanDisplay {
            plan: self,
            max_servers,
            health: None,
        }
    }
}

impl PlanDisplay<'_> {
    /// The health gate's settings the run will use, shown with the gates.
    pub fn with_health(mut self, health: Option<HealthFlags>) -> Self {
        self.health = health;
        self
    }
}

/// Which gate confirms each step, one line per kind: how many steps, of
/// which components, and what happens when a step is unhealthy (issue 14:
/// without execute only `server.agents` can be confirmed, and the plan
/// says so).
fn write_gates(f: &mut fmt::Formatter<'_>, p: &Plan, health: Option<HealthFlags>) -> fmt::Result {
    let mut gates: BTreeMap<Gate, (usize, Vec<&str>)> = BTreeMap::new();
    for sp in p.servers.values() {
        for st in sp.steps.iter().filter(|st| st.gate != Gate::None) {
            let (n, components) = gates.entry(st.gate).or_default();
            *n += 1;
            if !components.contains(&st.component.as_str()) {
                components.push(&st.component);
            }
        }
    }
    if gates.is_empty() {
        return Ok(());
    }
    let checks = gates
        .keys()
        .any(|g| matches!(g, Gate::Installer | Gate::GzHealth));
    match health {
        Some(h) if checks => writeln!(
            f,
            "\nHealth gates (services online for {} within {}):",
            humantime::format_duration(h.min_healthy),
            humantime::format_duration(h.timeout)
        )?,
        None if checks => writeln!(
            f,
            "\nHealth gates (services online for the installer's default, 10s on a real server):"
        )?,
        _ => writeln!(f, "\nHealth gates:")?,
    }
    for (gate, (n, mut components)) in gates {
        // Catalog order is the order steps run in; names sort for a
        // stable line.
        components.sort_unstable();
        writeln!(
            f,
            "  {}: {} ({})",
            gate.describe(),
            plural(n, "step", "steps"),
            components.join(", ")
        )?;
    }
    Ok(())
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.display().fmt(f)
    }
}

fn image(i: &ImageRef) -> String {
    format!("{} ({})", i.version, short(&i.uuid))
}

/// The `+ - ~` lines of one server, in step order then intent changes.
/// `grouped` leaves out instance UUIDs, so that servers with the same
/// changes render the same.
fn server_lines(sp: &crate::ServerPlan, grouped: bool) -> Vec<String> {
    let inst = |i: &agentsadm_types::ids::InstanceUuid| {
        if grouped {
            String::new()
        } else {
            format!(" {}", &i.to_string()[..8])
        }
    };
    let mut lines: Vec<String> = sp.steps.iter().map(step_line).collect();
    for ch in &sp.intent {
        // An instance target that goes with an upgrade of the same component
        // is implied by the `~` line (and listed in --json).
        if let IntentChange::UpdateInstance { component, .. } = ch
            && sp.steps.iter().any(|st| st.component == *component)
        {
            continue;
        }
        lines.push(match ch {
            IntentChange::UpdateInstance {
                component,
                instance,
                image,
                ..
            } => format!(
                "~ SAPI instance{} of {component}: image_uuid {}",
                inst(instance),
                short(image)
            ),
            IntentChange::CreateInstance {
                component,
                instance,
                image,
                ..
            } => format!(
                "+ SAPI instance{} of {component} (adopt), image_uuid {}",
                inst(instance),
                short(image)
            ),
            IntentChange::AdoptInstalled {
                component, image, ..
            } => format!(
                "+ SAPI instance of {component} (after install), image_uuid {}",
                short(image)
            ),
            IntentChange::DeleteInstance {
                component,
                instance,
            } => {
                format!(
                    "- SAPI instance {} of {component}",
                    &instance.to_string()[..8]
                )
            }
            IntentChange::DeleteReplaced {
                component,
                instance,
            } => format!(
                "- SAPI instance {} of {component} (replaced: once the server reports the new one)",
                &instance.to_string()[..8]
            ),
            IntentChange::Mark {
                component,
                instance,
                key,
                mark,
                ..
            } => match mark {
                Some(m) => format!(
                    "~ SAPI instance{} of {component}: params.{} {}",
                    inst(instance),
                    key.param(),
                    m.describe()
                ),
                None => format!(
                    "~ SAPI instance{} of {component}: params.{} cleared",
                    inst(instance),
                    key.param()
                ),
            },
            IntentChange::ForgetMark { component, key, .. } => format!(
                "- SAPI service {component}: params.{}:<server> (the mark's second copy)",
                key.param()
            ),
            IntentChange::Restore {
                component,
                instance,
                image,
                ..
            } => format!(
                "~ SAPI instance{} of {component}: params written again, image_uuid {}",
                inst(instance),
                short(image)
            ),
        });
    }
    lines
}

/// A service's copy of a server's mark, cleared (server delete, factory
/// reset).
fn forget_mark_line(
    server: Option<agentsadm_types::ids::ServerUuid>,
    hostname: Option<&str>,
    component: &agentsadm_types::component::ComponentName,
    key: crate::MarkKey,
) -> String {
    let of = match (hostname, server) {
        (Some(h), _) => h.to_string(),
        (None, Some(s)) => s.to_string(),
        (None, None) => "the server".to_string(),
    };
    format!(
        "- SAPI service {component}: the copy of {of}'s params.{}",
        key.param()
    )
}

/// The line of one step: `+` install, `~` upgrade, `-` remove, `!`
/// disable, `^` enable, with its transport (and the `gz disable` that
/// follows an install of a component disabled there).
fn step_line(st: &crate::Step) -> String {
    let t = st.transport.as_str();
    let t = match (&st.keep_off, st.transport) {
        (None, _) => t.to_string(),
        (Some(_), crate::TransportKind::InstallAgent) => {
            format!("{t}, then gz disable: disabled here, and cn-agent's postinstall enables it")
        }
        (Some(_), _) => format!("{t}, kept disabled (disabled here)"),
    };
    match &st.action {
        Action::Install { to } => format!("+ {} {} [{t}]", st.component, image(to)),
        Action::Upgrade { from, to } => {
            let from_img = from
                .image
                .as_ref()
                .map(|u| format!(" ({})", short(u)))
                .unwrap_or_default();
            format!(
                "~ {} {}{} -> {} [{t}]",
                st.component,
                if from.version.is_empty() {
                    "(version unknown)"
                } else {
                    &from.version
                },
                from_img,
                image(to)
            )
        }
        Action::Remove { installed } => {
            format!("- {} {} [{t}]", st.component, installed.version)
        }
        Action::Disable { mark } => format!(
            "! disable {}: its SMF services off and kept off ({}) [{t}]",
            st.component,
            mark.describe()
        ),
        Action::Enable => format!("^ enable {}: its SMF services on again [{t}]", st.component),
    }
}

/// The rollout as the plan shows it: a head line with the concurrency,
/// the rack limit and the failure budget, then one line per wave (the
/// canary wave first). Waves longer than `limit` are cut with a count.
pub fn rollout_lines(r: &Rollout, limit: usize) -> Vec<String> {
    let rack = r
        .max_per_rack
        .map(|n| format!(", at most {n} per rack"))
        .unwrap_or_default();
    let budget = match (r.budget, r.max_failures) {
        (Some(b), Some(given)) => format!(
            "halts once more than {} failed (--max-failures {given})",
            plural(b, "server has", "servers have")
        ),
        _ => "no failure budget".to_string(),
    };
    let mut out = vec![format!(
        "Rollout: {} at a time{rack}; {budget}:",
        plural(r.concurrency, "server", "servers")
    )];
    let canary_first = r.waves.first().is_some_and(|w| w.canary);
    for w in &r.waves {
        let hosts: Vec<&str> = w.servers.iter().map(|s| s.hostname.as_str()).collect();
        let mut shown = list_hosts(&hosts, limit);
        if hosts.len() > limit {
            shown.push_str(&format!(" ({} in all)", hosts.len()));
        }
        out.push(if w.canary {
            let why = r
                .canary_choice
                .as_ref()
                .map(|c| format!("; {}", c.describe()))
                .unwrap_or_default();
            format!("  canary: {shown} (must pass before the others start{why})")
        } else if canary_first {
            format!("  then, in this order: {shown}")
        } else {
            format!("  in this order: {shown}")
        });
    }
    if let Some(finish) = r.expected_finish {
        out.push(format!(
            "  expected finish: about {} after the start ({}; longest expected first)",
            short_duration(finish),
            finish_source(r.history_servers, r.len())
        ));
    }
    out
}

/// Where the expected finish comes from: the servers' own recorded
/// installs, the catalog's expected times, or both.
fn finish_source(from_history: usize, servers: usize) -> String {
    if from_history == 0 {
        "from the catalog's expected install times: no server has a recorded install of these yet"
            .to_string()
    } else if from_history >= servers && servers == 1 {
        "from the server's recorded installs".to_string()
    } else if from_history >= servers {
        format!(
            "from the recorded installs of all {}",
            plural(servers, "server", "servers")
        )
    } else {
        format!(
            "from the recorded installs of {} of {}, the catalog's expected times for the rest",
            from_history,
            plural(servers, "server", "servers")
        )
    }
}

/// `850ms`, `42s`, `3m05s`, `1h02m`: how long, as the plan shows it.
pub fn short_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// One record change as the plan shows it.
pub fn record_line(r: &RecordChange) -> String {
    match r {
        RecordChange::PostAgents {
            server,
            hostname,
            agents,
        } => format!(
            "~ CNAPI server.agents of {hostname} ({server}): {} from its own report",
            plural(agents.len(), "component", "components")
        ),
        RecordChange::CreateService {
            component,
            default_image,
        } => match default_image {
            Some(i) => format!("+ SAPI service {component} (default image {})", short(i)),
            None => format!("+ SAPI service {component}"),
        },
        RecordChange::ServiceDefault { change } => format!(
            "~ SAPI service {}: default image {} -> {}",
            change.component,
            change
                .from
                .as_ref()
                .map(short)
                .unwrap_or_else(|| "unset".into()),
            short(&change.to.uuid)
        ),
        RecordChange::ServiceMark {
            component,
            key,
            mark,
            ..
        } => match mark {
            Some(m) => format!(
                "~ SAPI service {component}: params.{} {}",
                key.param(),
                m.describe()
            ),
            None => format!("~ SAPI service {component}: params.{} removed", key.param()),
        },
        RecordChange::AdoptInstance {
            hostname,
            component,
            instance,
            exists,
            ..
        } => format!(
            "{} SAPI instance {} of {component} on {hostname} (adopt)",
            if *exists { "~" } else { "+" },
            &instance.to_string()[..8]
        ),
        RecordChange::Instance {
            server,
            hostname,
            change: IntentChange::ForgetMark { component, key, .. },
        } => forget_mark_line(*server, hostname.as_deref(), component, *key),
        RecordChange::Instance {
            hostname, change, ..
        } => {
            let on = hostname
                .as_deref()
                .map(|h| format!(" on {h}"))
                .unwrap_or_default();
            let (mark, what) = match change {
                IntentChange::DeleteInstance { .. } | IntentChange::DeleteReplaced { .. } => {
                    ("-", String::new())
                }
                IntentChange::CreateInstance { image, .. } => {
                    ("+", format!(", image_uuid {}", short(image)))
                }
                IntentChange::UpdateInstance { image, .. }
                | IntentChange::AdoptInstalled { image, .. } => {
                    ("~", format!(": image_uuid {}", short(image)))
                }
                IntentChange::Mark { key, .. } => ("~", format!(": params.{}", key.param())),
                // Rendered by the arm above; kept total rather than panicking.
                IntentChange::ForgetMark { key, .. } => ("-", format!(": params.{}", key.param())),
                IntentChange::Restore { image, .. } => (
                    "~",
                    format!(": params written again, image_uuid {}", short(image)),
                ),
            };
            let instance = match change {
                IntentChange::UpdateInstance { instance, .. }
                | IntentChange::CreateInstance { instance, .. }
                | IntentChange::DeleteInstance { instance, .. }
                | IntentChange::DeleteReplaced { instance, .. }
                | IntentChange::Mark { instance, .. }
                | IntentChange::Restore { instance, .. } => {
                    format!(" {}", &instance.to_string()[..8])
                }
                IntentChange::AdoptInstalled { .. } | IntentChange::ForgetMark { .. } => {
                    String::new()
                }
            };
            format!(
                "{mark} SAPI instance{instance} of {}{on}{what}",
                change.component()
            )
        }
        RecordChange::Server {
            server,
            hostname,
            call,
            ..
        } => format!(
            "! CNAPI {} of {}{server}",
            call.as_str(),
            hostname
                .as_deref()
                .map(|h| format!("{h} "))
                .unwrap_or_default()
        ),
    }
}

fn list_hosts(hosts: &[&str], limit: usize) -> String {
    let mut shown: Vec<&str> = hosts.iter().copied().take(limit).collect();
    if hosts.len() > limit {
        shown.push("...");
    }
    shown.join(", ")
}

impl fmt::Display for PlanDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.plan;
        // A plan of no named component (a repair of whatever drifted)
        // says just its operation.
        let what = if p.components.is_empty() {
            String::new()
        } else {
            format!(" {}", p.components.join(", "))
        };
        writeln!(
            f,
            "Plan: {}{what} ({} selected)",
            p.operation,
            plural(p.selected_servers, "server", "servers")
        )?;
        if let Some(of) = &p.reverts {
            writeln!(
                f,
                "Reverts run {} ({}, started {})",
                of.run, of.operation, of.started
            )?;
        }
        // A datacenter not (fully) set up: its cause first, not buried
        // under one skip line per server or component.
        for cause in lead_causes(p) {
            writeln!(f, "{cause}")?;
        }

        write_images(f, p)?;
        self.write_agentsadm_first(f)?;
        self.write_servers(f)?;
        write_racks(f, p)?;
        if !p.rollout.is_empty() {
            let limit = if p.servers.len() <= self.max_servers {
                usize::MAX
            } else {
                10
            };
            writeln!(f)?;
            for line in rollout_lines(&p.rollout, limit) {
                writeln!(f, "{line}")?;
            }
        }

        write_gates(f, p, self.health)?;
        if !p.skips.is_empty() {
            if p.skips.iter().any(|s| s.blocking) {
                writeln!(
                    f,
                    "\nSkipped (! blocking: the datacenter does not converge until resolved):"
                )?;
            } else {
                writeln!(f, "\nSkipped:")?;
            }
            write_skips(f, &p.skips)?;
        }
        if !p.warnings.is_empty() {
            writeln!(f, "\nWarnings:")?;
            for w in &p.warnings {
                writeln!(f, "  ! {w}")?;
            }
        }

        write_summary(f, p)
    }
}

impl PlanDisplay<'_> {
    /// The agentsadm steps the plan added because a server's copy cannot
    /// parse its other steps, one line per server (`agentsadm: cn0042 1.2.0
    /// -> 1.4.0, needed by gz-tools`), or beyond `max_servers` servers
    /// with the same change on one line.
    fn write_agentsadm_first(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.plan;
        let mut lines: Vec<(String, String)> = Vec::new();
        for (_, sp) in p.servers_in_order() {
            for st in sp.steps.iter().filter(|st| !st.needed_by.is_empty()) {
                let from = match &st.action {
                    Action::Upgrade { from, .. } if from.version.is_empty() => {
                        "(version unknown)".to_string()
                    }
                    Action::Upgrade { from, .. } => from.version.to_string(),
                    _ => "(none)".to_string(),
                };
                let to = st
                    .action
                    .target()
                    .map(|t| t.version.as_str())
                    .unwrap_or("?");
                let change = format!(
                    "{from} -> {to}, needed by {} [{}]",
                    st.needed_by.join(", "),
                    st.transport.as_str()
                );
                lines.push((sp.hostname.clone(), change));
            }
        }
        if lines.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "\nagentsadm first (the servers' own copy is missing or too old for their steps):"
        )?;
        if p.servers.len() <= self.max_servers {
            for (host, change) in &lines {
                writeln!(f, "  agentsadm: {host} {change}")?;
            }
            return Ok(());
        }
        let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (host, change) in &lines {
            groups.entry(change).or_default().push(host);
        }
        for (change, hosts) in groups {
            let who = match hosts.as_slice() {
                [one] => (*one).to_string(),
                many => format!(
                    "{} ({})",
                    plural(many.len(), "server", "servers"),
                    list_hosts(many, 5)
                ),
            };
            writeln!(f, "  agentsadm: {who} {change}")?;
        }
        Ok(())
    }

    /// Each server's lines, or (beyond `max_servers`) servers with the
    /// same lines grouped.
    fn write_servers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.plan;
        if !p.servers.is_empty() {
            writeln!(f, "\nServers:")?;
            if p.servers.len() <= self.max_servers {
                for (uuid, sp) in p.servers_in_order() {
                    let hn = if sp.headnode { " headnode" } else { "" };
                    writeln!(f, "  {} ({uuid}){hn}", sp.hostname)?;
                    for line in server_lines(sp, false) {
                        writeln!(f, "    {line}")?;
                    }
                }
            } else {
                // Group servers whose lines are identical.
                let mut groups: BTreeMap<Vec<String>, Vec<&str>> = BTreeMap::new();
                // In run order, so that the hostnames shown read cn0001, cn0002...
                for (_, sp) in p.servers_in_order() {
                    groups
                        .entry(server_lines(sp, true))
                        .or_default()
                        .push(&sp.hostname);
                }
                let mut groups: Vec<_> = groups.into_iter().collect();
                groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
                for (lines, hosts) in groups {
                    writeln!(
                        f,
                        "  {}: {}",
                        plural(hosts.len(), "server", "servers"),
                        list_hosts(&hosts, 5)
                    )?;
                    for line in lines {
                        writeln!(f, "    {line}")?;
                    }
                }
            }
        }

        Ok(())
    }
}

/// Target images (only those something changes), imports, record changes
/// and service defaults.
fn write_images(f: &mut fmt::Formatter<'_>, p: &Plan) -> fmt::Result {
    // Only the components the plan changes: a bulk update names every
    // component, and fifteen lines of images already in place hide the
    // four that move.
    let changed = p.changed_components();
    let (shown, unchanged): (Vec<_>, Vec<_>) = p
        .targets
        .iter()
        .partition(|(name, _)| changed.contains(name.as_str()));
    if !shown.is_empty() {
        writeln!(f, "\nTarget images:")?;
        for (name, t) in &shown {
            writeln!(f, "  {name} {} {}", t.version, t.uuid)?;
        }
    }
    if !unchanged.is_empty() {
        let names: Vec<&str> = unchanged.iter().map(|(n, _)| n.as_str()).collect();
        writeln!(f, "\nNo change for: {}", names.join(", "))?;
    }
    if !p.imports.is_empty() {
        writeln!(f, "\nImport into the datacenter IMGAPI:")?;
        for i in &p.imports {
            writeln!(
                f,
                "  + {} {} {} from {}",
                i.name,
                i.version,
                i.uuid,
                i.import_from.as_deref().unwrap_or("?")
            )?;
        }
    }
    if !p.records.is_empty() {
        writeln!(f, "\nRecords (before any server):")?;
        for r in &p.records {
            writeln!(f, "  {}", record_line(r))?;
        }
    }
    if !p.service_changes.is_empty() {
        writeln!(f, "\nSAPI service defaults (image for new servers):")?;
        for c in &p.service_changes {
            let from = match (&c.from, &c.from_version) {
                (Some(u), Some(v)) => format!("{v} ({})", short(u)),
                (Some(u), None) => short(u),
                (None, _) => "unset".to_string(),
            };
            writeln!(f, "  ~ {}: {from} -> {}", c.component, image(&c.to))?;
        }
    }

    Ok(())
}

/// Rack-aware batches (--max-per-rack, canaries from different racks)
/// follow CNAPI's rack_identifier: the grouping, when racks are set.
fn write_racks(f: &mut fmt::Formatter<'_>, p: &Plan) -> fmt::Result {
    // Rack-aware batches (--max-per-rack, canaries from different
    // racks) follow CNAPI's rack_identifier: show the grouping when
    // racks are set.
    if p.servers.values().any(|sp| sp.rack.is_some()) {
        let mut racks: BTreeMap<Option<&str>, Vec<&str>> = BTreeMap::new();
        for (_, sp) in p.servers_in_order() {
            racks
                .entry(sp.rack.as_deref())
                .or_default()
                .push(&sp.hostname);
        }
        writeln!(f, "\nRacks:")?;
        for (rack, hosts) in &racks {
            writeln!(
                f,
                "  {}: {}: {}",
                rack.unwrap_or("(no rack)"),
                plural(hosts.len(), "server", "servers"),
                list_hosts(hosts, 3)
            )?;
        }
    }

    Ok(())
}

/// The closing line: what changes, what is skipped.
fn write_summary(f: &mut fmt::Formatter<'_>, p: &Plan) -> fmt::Result {
    let c = p.counts();
    let mut summary = String::new();
    if p.is_empty() {
        summary.push_str("Nothing to do");
    } else {
        let _ = write!(
            summary,
            "{} to change: {}, {}, {}",
            plural(c.servers, "server", "servers"),
            // A revert puts earlier images back: not an upgrade.
            if p.operation == Operation::Revert {
                plural(c.upgrades, "image put back", "images put back")
            } else {
                plural(c.upgrades, "upgrade", "upgrades")
            },
            plural(c.installs, "install", "installs"),
            plural(c.removals, "removal", "removals")
        );
        if c.switches > 0 {
            let _ = write!(
                summary,
                ", {}",
                plural(c.switches, "disable or enable", "disables or enables")
            );
        }
        if c.intent_only_servers > 0 {
            let _ = write!(
                summary,
                ", {} SAPI only",
                plural(c.intent_only_servers, "server", "servers")
            );
        }
    }
    // What "blocking" means is said where it is counted: a blocking skip
    // keeps the datacenter from converging, so the command exits 2.
    let skipped = c.blocking_skips + c.other_skips;
    if c.blocking_skips > 0 {
        let _ = write!(
            summary,
            "; {skipped} skipped, {} blocking (marked !: the command exits 2 until {} resolved)",
            c.blocking_skips,
            if c.blocking_skips == 1 {
                "it is"
            } else {
                "they are"
            }
        );
    } else if skipped > 0 {
        let _ = write!(
            summary,
            "; {skipped} skipped (none blocking: {} not change the exit status)",
            if skipped == 1 { "it does" } else { "they do" }
        );
    }
    writeln!(f, "\n{summary}.")
}

/// Why a server was skipped, as shown. marlin-agent runs only on Manta
/// storage nodes: a server without it is simply not one, and advice to
/// install it there would be wrong.
fn skip_reason(s: &Skip) -> String {
    if s.component.as_deref() == Some("marlin-agent")
        && matches!(s.reason, crate::SkipReason::ComponentAbsent)
    {
        return "not installed (not a Manta storage node)".to_string();
    }
    s.reason.describe()
}

/// Component-wide skips of components without a SAPI service, by name.
fn unmanaged_components(skips: &[Skip]) -> Vec<&str> {
    skips
        .iter()
        .filter(|s| s.server.is_none() && s.reason == SkipReason::Unmanaged)
        .filter_map(|s| s.component.as_deref())
        .collect()
}

/// What leaves a datacenter short, in one line each, when it is the
/// reason for many skips: servers that are not set up (half the selection
/// or more), and (more than one) components never adopted into SAPI.
fn lead_causes(p: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    let not_setup = p
        .skips
        .iter()
        .filter(|s| s.component.is_none() && s.reason == SkipReason::NotSetup)
        .count();
    // Leading only when they are half the selection or more: one server
    // being set up in a large datacenter is an ordinary skip.
    if not_setup > 0 && not_setup * 2 >= p.selected_servers {
        out.push(format!(
            "{} not set up (CNAPI setup=false) and left out: set them up first ('sdc-server setup'), then run the same command again",
            plural(not_setup, "server is", "servers are")
        ));
    }
    let unmanaged = unmanaged_components(&p.skips);
    if unmanaged.len() > 1 {
        out.push(format!(
            "{} have no SAPI service, so agentsadm does not manage them yet: run 'agentsadm adopt' first ({})",
            plural(unmanaged.len(), "component", "components"),
            list_hosts(&unmanaged, 5)
        ));
    }
    out
}

/// Skips grouped by (component, reason): a few are listed one per line,
/// many are counted with some hostnames. Blocking skips are marked `!`.
/// Several unmanaged components are one line.
fn write_skips(f: &mut fmt::Formatter<'_>, skips: &[Skip]) -> fmt::Result {
    let unmanaged = unmanaged_components(skips);
    let collapse = unmanaged.len() > 1;
    if collapse {
        let blocking = skips
            .iter()
            .any(|s| s.server.is_none() && s.reason == SkipReason::Unmanaged && s.blocking);
        writeln!(
            f,
            "  {} {}: {}",
            if blocking { "!" } else { " " },
            plural(unmanaged.len(), "component", "components"),
            SkipReason::Unmanaged.describe()
        )?;
    }
    let mut groups: BTreeMap<(bool, Option<&str>, String), Vec<&Skip>> = BTreeMap::new();
    for s in skips {
        if collapse && s.server.is_none() && s.reason == SkipReason::Unmanaged {
            continue;
        }
        groups
            .entry((!s.blocking, s.component.as_deref(), skip_reason(s)))
            .or_default()
            .push(s);
    }
    for ((not_blocking, component, why), members) in groups {
        let mark = if not_blocking { " " } else { "!" };
        let prefix = component.map(|c| format!("{c}: ")).unwrap_or_default();
        let with_server: Vec<&Skip> = members
            .iter()
            .copied()
            .filter(|s| s.server.is_some())
            .collect();
        if with_server.is_empty() {
            writeln!(f, "  {mark} {prefix}{why}")?;
        } else if with_server.len() <= 3 {
            for s in with_server {
                writeln!(
                    f,
                    "  {mark} {prefix}{} ({}): {why}",
                    s.hostname.as_deref().unwrap_or("?"),
                    s.server.map(|u| u.to_string()).unwrap_or_default()
                )?;
            }
        } else {
            let hosts: Vec<&str> = with_server
                .iter()
                .map(|s| s.hostname.as_deref().unwrap_or("?"))
                .collect();
            writeln!(
                f,
                "  {mark} {prefix}{} ({}): {why}",
                plural(hosts.len(), "server", "servers"),
                list_hosts(&hosts, 5)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod skip_tests {
    use super::*;
    use crate::SkipReason;

    #[test]
    fn marlin_agent_absent_is_not_a_storage_node() {
        let skip = |component: &str| Skip {
            server: None,
            hostname: Some("cn1".into()),
            component: Some(component.parse().unwrap()),
            reason: SkipReason::ComponentAbsent,
            blocking: false,
        };
        let why = skip_reason(&skip("marlin-agent"));
        assert_eq!(why, "not installed (not a Manta storage node)");
        assert!(skip_reason(&skip("vm-agent")).contains("agentsadm install"));
    }
}

#[cfg(test)]
mod wording_tests {
    use super::finish_source;

    /// "from the history of 0 of 60 servers" said nothing true: where the
    /// estimate comes from, in each case.
    #[test]
    fn the_expected_finish_says_where_it_comes_from() {
        assert_eq!(
            finish_source(0, 60),
            "from the catalog's expected install times: no server has a recorded install of these yet"
        );
        assert_eq!(
            finish_source(60, 60),
            "from the recorded installs of all 60 servers"
        );
        assert_eq!(finish_source(1, 1), "from the server's recorded installs");
        assert_eq!(
            finish_source(5, 6),
            "from the recorded installs of 5 of 6 servers, the catalog's expected times for the rest"
        );
    }
}
