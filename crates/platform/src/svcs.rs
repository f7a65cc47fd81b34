//! What the health gate reads from SMF on SmartOS, parsed from `svcs`
//! output (parsed here, on every OS, so the parser is tested from fixture
//! text on Linux; [`super::smartos`] runs the command).
//!
//! `svcs -H -o state,nstate,ctid,stime <fmri>` prints one line: the state,
//! the state it is moving to (`-` when none), the primary contract id of
//! its processes (`-` for a transient service, or when none run) and the
//! time it entered its state. A service that exits and is restarted by
//! its restarter between two looks comes back in a new contract and at a
//! new `stime`: the pair is the run the gate watches
//! ([`super::ServiceHealth::run`]), so an exit between two looks is seen
//! even when both looks say `online`.

use super::ServiceState;

/// The arguments of the `svcs` call, before the FMRI.
pub const HEALTH_ARGS: [&str; 3] = ["-H", "-o", "state,nstate,ctid,stime"];

/// One line of `svcs -H -o state,nstate,ctid,stime`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvcsLine {
    pub state: ServiceState,
    /// `None` for `-` (not moving).
    pub next_state: Option<ServiceState>,
    /// `None` for `-`.
    pub contract: Option<u64>,
    /// When it entered its state (`12:01:33`, or `Nov_26` after a day).
    pub since: String,
}

impl SvcsLine {
    /// The run the gate compares between looks.
    pub fn run(&self) -> String {
        let ctid = self
            .contract
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".to_string());
        format!("contract {ctid} since {}", self.since)
    }
}

/// Parse the first line of the output; `None` when it is not such a line.
pub fn parse_health(text: &str) -> Option<SvcsLine> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [state, nstate, ctid, since] = fields.as_slice() else {
        return None;
    };
    let dash = |s: &str| (s != "-").then(|| s.to_string());
    Some(SvcsLine {
        state: ServiceState::parse(state),
        next_state: dash(nstate).map(|s| ServiceState::parse(&s)),
        contract: match dash(ctid) {
            None => None,
            Some(c) => Some(c.parse().ok()?),
        },
        since: since.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svcs_lines_parse() {
        let online = parse_health("online         -             8137   12:01:33\n").unwrap();
        assert_eq!(online.state, ServiceState::Online);
        assert_eq!(online.next_state, None);
        assert_eq!(online.contract, Some(8137));
        assert_eq!(online.run(), "contract 8137 since 12:01:33");
        let moving = parse_health("online   offline   8137   Nov_26").unwrap();
        assert_eq!(moving.next_state, Some(ServiceState::Offline));
        let transient = parse_health("online - - 9:03:11").unwrap();
        assert_eq!(transient.contract, None);
        assert_eq!(transient.run(), "contract - since 9:03:11");
        let maint = parse_health("maintenance -  -  12:02:40").unwrap();
        assert_eq!(maint.state, ServiceState::Maintenance);
        assert_eq!(parse_health(""), None);
        assert_eq!(parse_health("online - x 1:00:00"), None);
        assert_eq!(parse_health("online -"), None);
    }
}
