//! What a `gz` command prints: the result document (`--json`) or a line per
//! component, and the report table; to the terminal or, for in-process
//! runs, into buffers.

use agentsadm_api::remote::AgentsReport;

use agentsadm_api::remote::ComponentAction;

use agentsadm_api::remote::GzResult;

/// Where output goes: the terminal, or buffers (in-process runs).
#[derive(Debug)]
pub(super) struct Printer {
    json: bool,
    quiet: bool,
    capture: Option<(String, String)>,
}

impl Printer {
    /// Print to stdout and stderr.
    pub(super) fn terminal(json: bool, quiet: bool) -> Printer {
        Printer {
            json,
            quiet,
            capture: None,
        }
    }

    /// Keep stdout and stderr for [`Printer::take`].
    #[cfg(feature = "in-process")]
    pub(super) fn captured(json: bool, quiet: bool) -> Printer {
        Printer {
            json,
            quiet,
            capture: Some((String::new(), String::new())),
        }
    }

    /// A nested command line (a handed-over job) brings its own `--json`
    /// and `--quiet`.
    pub(super) fn set_mode(&mut self, json: bool, quiet: bool) {
        self.json = json;
        self.quiet = quiet;
    }

    /// The captured stdout and stderr.
    #[cfg(feature = "in-process")]
    pub(super) fn take(&mut self) -> (String, String) {
        self.capture.take().unwrap_or_default()
    }

    fn out(&mut self, text: &str) {
        match &mut self.capture {
            Some((o, _)) => {
                o.push_str(text);
                o.push('\n');
            }
            None => println!("{text}"),
        }
    }

    pub(super) fn err(&mut self, text: &str) {
        match &mut self.capture {
            Some((_, e)) => {
                e.push_str(text);
                e.push('\n');
            }
            None => eprintln!("{text}"),
        }
    }

    pub(super) fn line(&mut self, text: &str) {
        if !self.json && !self.quiet {
            self.out(text);
        }
    }

    fn json<T: serde::Serialize>(&mut self, value: &T) {
        let text = serde_json::to_string_pretty(value)
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        self.out(&text);
    }
}

pub(super) fn print_result(printer: &mut Printer, result: &GzResult) -> u8 {
    if printer.json {
        printer.json(result);
    } else {
        for c in &result.components {
            let version = c.version.as_deref().unwrap_or("");
            let image = c
                .image_uuid
                .map(|i| format!(" (image {i})"))
                .unwrap_or_default();
            let secs = c.elapsed_ms as f64 / 1000.0;
            let line = match c.action {
                ComponentAction::Installed => {
                    format!("{}: installed {version}{image} in {secs:.1}s", c.name)
                }
                ComponentAction::Upgraded => format!(
                    "{}: upgraded {}to {version}{image} in {secs:.1}s",
                    c.name,
                    c.from_image
                        .map(|i| format!("from image {i} "))
                        .unwrap_or_default()
                ),
                ComponentAction::Unchanged => {
                    // Nothing ran: say how to repair a damaged copy.
                    format!(
                        "{}: {version}{image} already installed, unchanged (gz install --force reinstalls it and reruns its hooks)",
                        c.name
                    )
                }
                ComponentAction::Removed => format!(
                    "{}: removed {version}{}",
                    c.name,
                    c.from_image
                        .map(|i| format!(" (image {i})"))
                        .unwrap_or_default()
                ),
                ComponentAction::Absent => format!("{}: not installed, nothing to remove", c.name),
                ComponentAction::RolledBack => {
                    format!("{}: rolled back to {version}{image} in {secs:.1}s", c.name)
                }
            };
            printer.line(&line);
        }
        for w in &result.warnings {
            printer.err(&format!("warning: {w}"));
        }
    }
    match &result.error {
        None => 0,
        Some(f) => {
            if !printer.json {
                let who = f
                    .component
                    .as_deref()
                    .map(|c| format!("{c}: "))
                    .unwrap_or_default();
                // A run that could not identify its server has no UUID
                // to name (the message names the root instead).
                let server = if result.server_uuid.as_uuid().is_nil() {
                    String::new()
                } else {
                    format!(" on server {}", result.server_uuid)
                };
                printer.err(&format!(
                    "agentsadm: error: {who}{} failed{server}: {}",
                    f.step, f.message
                ));
            }
            1
        }
    }
}

/// `gz health`: the result document, or a line saying which services are
/// online.
pub(super) fn print_health(printer: &mut Printer, result: &GzResult, checked: &[String]) -> u8 {
    if printer.json || result.error.is_some() {
        return print_result(printer, result);
    }
    for c in &result.components {
        let services = if checked.is_empty() {
            "no services to check".to_string()
        } else {
            format!("online: {}", checked.join(", "))
        };
        printer.line(&format!("{}: healthy ({services})", c.name));
    }
    0
}

pub(super) fn print_report(printer: &mut Printer, report: &AgentsReport) {
    if printer.json {
        printer.json(report);
        return;
    }
    let rows: Vec<Vec<String>> = report
        .agents
        .iter()
        .map(|a| {
            vec![
                a.name.to_string(),
                a.version.to_string(),
                a.image_uuid
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                a.uuid.map(|i| i.to_string()).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let table = agentsadm_types::output::table(&["NAME", "VERSION", "IMAGE", "INSTANCE"], &rows);
    printer.line(table.trim_end());
    for e in &report.errors {
        printer.err(&format!("warning: {}: {}", e.name, e.message));
    }
}
