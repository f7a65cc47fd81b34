//! Which agentsadm on a server parses which command line. The orchestrator
//! runs `agentsadm gz ...` on servers through CNAPI execute, and a server
//! keeps whatever agentsadm it was given: one that predates a word of the
//! command line refuses the whole command (clap's exit status 2), so every
//! command line is built here, from words this module dates.
//!
//! - [`WORDS`] is the one table: each subcommand and flag the orchestrator
//!   sends, with the first agentsadm release that parses it and the commit
//!   that introduced it.
//! - [`GzUse`] names the command line each kind of step sends, and its
//!   minimum ([`GzUse::needs`]) is the newest of its words. The planner
//!   gives every step the minimum of what it sends and puts an agentsadm
//!   step first on a server whose copy is older (or unknown); the
//!   simulator's execute refuses a word newer than the server's copy
//!   ([`first_unknown`]), as that copy's own parser would.
//! - The builders ([`install_args`], [`install_together_args`],
//!   [`remove_args`], [`health_args`], [`report_args`], [`record_args`])
//!   are what the transport sends; a test
//!   pins each one's words to its [`GzUse`] and to the table.
//!
//! How the dates come out: `gz install|remove|report --json` are as old as
//! `agentsadm gz` (f35ef4b, 58961a7, 2026-11-22). The health gate's words
//! (`gz health`, `--min-healthy`, `--health-timeout`) and `--expect-current`
//! came with 1fbed9c and 795dd34 (2026-11-23/24), `--inside-cn-agent` with
//! fb6bdf8 (2026-11-24), all before agentsadm became a component that
//! records and reports its own version (2836fea, c3a6e12, 2026-11-26, crate
//! version 0.1.0, the first `make release`). So every copy that reports a
//! version parses all of them, and a copy that reports none (a binary CN
//! setup fetched alone, or one from before 0.1.0) is taken to parse only
//! the baseline: it gets an agentsadm step first. Having the `agentsadm`
//! kind (so that `gz install` of an agentsadm image works) is implied by
//! reporting a version at all.
//!
//! Adding a word: ship it in a new minor version (Cargo.toml), add it to
//! [`WORDS`] with that version, list it in the [`GzUse`] that sends it, and
//! build the command line here.

use semver::Version;

use crate::ids::ImageUuid;
use crate::version::VersionKey;

/// Parsed by every agentsadm that has `agentsadm gz`.
pub const BASELINE: Version = Version::new(0, 0, 0);

/// The first release that records and reports its own version.
pub const FIRST_VERSIONED: Version = Version::new(0, 1, 0);

/// The first release with `gz disable|enable` (an operator's disable kept
/// across upgrades, issue 25).
pub const SWITCHES: Version = Version::new(0, 2, 0);

/// The first release whose `gz install` takes `--expect NAME=IMAGE|none`
/// per component (issue 35: one server's execute-carried components in one
/// `gz install A B`, their gates overlapping inside the installer). A
/// server whose copy is older gets each component alone, as before: no
/// agentsadm step is added only to group.
pub const TOGETHER: Version = Version::new(0, 3, 0);

/// One word of a command line (a subcommand of `gz`, or a flag) and the
/// first agentsadm that parses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    pub word: &'static str,
    pub since: Version,
    /// The commit (and date) that introduced it.
    pub introduced: &'static str,
}

/// Every word the orchestrator sends, dated (module docs).
pub static WORDS: [Word; 16] = [
    Word {
        word: "gz",
        since: BASELINE,
        introduced: "f35ef4b 2026-11-22",
    },
    Word {
        word: "install",
        since: BASELINE,
        introduced: "f35ef4b 2026-11-22",
    },
    Word {
        word: "remove",
        since: BASELINE,
        introduced: "f35ef4b 2026-11-22",
    },
    Word {
        word: "report",
        since: BASELINE,
        introduced: "f35ef4b 2026-11-22",
    },
    Word {
        word: "--json",
        since: BASELINE,
        introduced: "58961a7 2026-11-22",
    },
    Word {
        word: "health",
        since: FIRST_VERSIONED,
        introduced: "1fbed9c 2026-11-23",
    },
    Word {
        word: "--expect-current",
        since: FIRST_VERSIONED,
        introduced: "1fbed9c 2026-11-23",
    },
    Word {
        word: "--min-healthy",
        since: FIRST_VERSIONED,
        introduced: "1fbed9c 2026-11-23",
    },
    Word {
        word: "--health-timeout",
        since: FIRST_VERSIONED,
        introduced: "1fbed9c 2026-11-23",
    },
    Word {
        word: "--inside-cn-agent",
        since: FIRST_VERSIONED,
        introduced: "fb6bdf8 2026-11-24",
    },
    Word {
        word: "disable",
        since: SWITCHES,
        introduced: "6b99f00 2026-11-26",
    },
    Word {
        word: "enable",
        since: SWITCHES,
        introduced: "6b99f00 2026-11-26",
    },
    Word {
        word: "--by",
        since: SWITCHES,
        introduced: "6b99f00 2026-11-26",
    },
    Word {
        word: "--at",
        since: SWITCHES,
        introduced: "6b99f00 2026-11-26",
    },
    Word {
        word: "--reason",
        since: SWITCHES,
        introduced: "6b99f00 2026-11-26",
    },
    Word {
        word: "--expect",
        since: TOGETHER,
        introduced: "3a3fa7a 2026-12-02",
    },
];

/// The first agentsadm that parses `word`, if the table dates it.
pub fn since(word: &str) -> Option<&'static Version> {
    WORDS.iter().find(|w| w.word == word).map(|w| &w.since)
}

/// What a kind of step sends to the server's agentsadm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GzUse {
    /// An execute step's install or upgrade: `gz install IMAGE --json
    /// --inside-cn-agent [--expect-current X] [health flags]`.
    Install,
    /// Several execute steps of one server in one command: `gz install
    /// IMAGE... --json --inside-cn-agent --expect NAME=X... [health flags]`
    /// ([`install_together_args`]).
    InstallTogether,
    /// An execute step's removal: `gz remove NAME --json --inside-cn-agent`.
    Remove,
    /// The health gate after cn-agent's task: `gz health NAME --json
    /// [health flags]`.
    Health,
    /// A server's own report (`check`, settling a task CNAPI lost): `gz
    /// report --json`.
    Report,
    /// The bootstrap's last part, by the copy it just put in place: `gz
    /// install IMAGE --json`.
    Record,
    /// An operator's disable or enable, and the disable again after an
    /// install of a component disabled there: `gz disable NAME --by B --at
    /// T [--reason R] --json --inside-cn-agent`, `gz enable NAME --json
    /// --inside-cn-agent`.
    Switch,
}

impl GzUse {
    /// Every word this kind of step may send.
    pub fn words(&self) -> &'static [&'static str] {
        match self {
            GzUse::Install => &[
                "gz",
                "install",
                "--json",
                "--inside-cn-agent",
                "--expect-current",
                "--min-healthy",
                "--health-timeout",
            ],
            GzUse::InstallTogether => &[
                "gz",
                "install",
                "--json",
                "--inside-cn-agent",
                "--expect",
                "--min-healthy",
                "--health-timeout",
            ],
            GzUse::Remove => &["gz", "remove", "--json", "--inside-cn-agent"],
            GzUse::Health => &[
                "gz",
                "health",
                "--json",
                "--min-healthy",
                "--health-timeout",
            ],
            GzUse::Report => &["gz", "report", "--json"],
            GzUse::Record => &["gz", "install", "--json"],
            GzUse::Switch => &[
                "gz",
                "disable",
                "enable",
                "--by",
                "--at",
                "--reason",
                "--json",
                "--inside-cn-agent",
            ],
        }
    }

    /// The oldest agentsadm that parses everything this kind sends.
    pub fn needs(&self) -> Version {
        self.words()
            .iter()
            .filter_map(|w| since(w))
            .max()
            .cloned()
            .unwrap_or(BASELINE)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            GzUse::Install => "gz install",
            GzUse::InstallTogether => "gz install (several)",
            GzUse::Remove => "gz remove",
            GzUse::Health => "gz health",
            GzUse::Report => "gz report",
            GzUse::Record => "gz install (record)",
            GzUse::Switch => "gz disable|enable",
        }
    }
}

/// Whether an agentsadm of `version` (`None`: one that says no version)
/// parses what needs `min`.
pub fn parses(version: Option<&VersionKey>, min: &Version) -> bool {
    match version {
        Some(v) => v.at_least(min),
        None => *min == BASELINE,
    }
}

/// The words of a command line: `gz` and its subcommand, and every flag
/// (without an `=value`). Operands and flag values are not words.
pub fn words_of(argv: &[String]) -> Vec<&str> {
    let mut out = Vec::new();
    for (i, a) in argv.iter().enumerate() {
        if let Some(flag) = a.strip_prefix("--") {
            let name = flag.split('=').next().unwrap_or_default();
            out.push(&a[..2 + name.len()]);
        } else if i < 2 && !a.starts_with('-') {
            out.push(a.as_str());
        }
    }
    out
}

/// The first word of `argv` that an agentsadm of `version` (`None`: one
/// that says no version) does not parse, if any. Words the table does not
/// date are left to the binary (the orchestrator never sends them).
pub fn first_unknown<'a>(argv: &'a [String], version: Option<&VersionKey>) -> Option<&'a str> {
    words_of(argv)
        .into_iter()
        .find(|w| since(w).is_some_and(|min| !parses(version, min)))
}

/// What clap prints when the command line has `word`, which this binary
/// does not know (and it exits 2): an unknown subcommand of `gz`, or an
/// unexpected flag.
pub fn refusal(argv: &[String], word: &str) -> String {
    let sub = argv.get(1).map(String::as_str).unwrap_or_default();
    if !word.starts_with('-') {
        format!(
            "error: unrecognized subcommand '{word}'\n\nUsage: agentsadm gz <COMMAND>\n\nFor more information, try '--help'.\n"
        )
    } else {
        format!(
            "error: unexpected argument '{word}' found\n\nUsage: agentsadm gz {sub} [OPTIONS]\n\nFor more information, try '--help'.\n"
        )
    }
}

/// The exit status of a command line clap refused.
pub const USAGE_EXIT_STATUS: i32 = 2;

/// [`GzUse::Install`]: install or upgrade to `image`. `expect_current`:
/// what the server must have now (`Some(None)`: nothing). `health`: the
/// health gate's flags (`HealthFlags::gz_args`), if any.
pub fn install_args(
    image: ImageUuid,
    expect_current: Option<Option<ImageUuid>>,
    health: &[String],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "gz".into(),
        "install".into(),
        image.to_string(),
        "--json".into(),
        // Said on every execute: CNAPI runs the command through Ur by
        // default and through cn-agent behind a feature flag, and the mode
        // read from SAPI is no promise about one request. Inside cn-agent,
        // work that stops cn-agent must be handed off; under Ur it costs one
        // transient-service run (cn-agent's new image is confirmed through
        // `server.agents` either way).
        "--inside-cn-agent".into(),
    ];
    if let Some(expected) = expect_current {
        args.push("--expect-current".into());
        args.push(
            expected
                .map(|i| i.to_string())
                .unwrap_or_else(|| "none".into()),
        );
    }
    args.extend(health.iter().cloned());
    args
}

/// [`GzUse::InstallTogether`]: install or upgrade several components in
/// one run, each `(component, image, expect_current)`: the installer runs
/// the parallel-safe ones at once, their health gates overlapping, each in
/// its own transaction. Every component states what the server must have
/// now (`--expect NAME=IMAGE|none`); one whose expectation the plan does
/// not know is not sent together (the caller's rule).
pub fn install_together_args(
    members: &[(&str, ImageUuid, Option<ImageUuid>)],
    health: &[String],
) -> Vec<String> {
    let mut args: Vec<String> = vec!["gz".into(), "install".into()];
    args.extend(members.iter().map(|(_, image, _)| image.to_string()));
    args.extend(["--json".into(), "--inside-cn-agent".into()]);
    for (name, _, expected) in members {
        let now = expected
            .map(|i| i.to_string())
            .unwrap_or_else(|| "none".into());
        args.extend(["--expect".into(), format!("{name}={now}")]);
    }
    args.extend(health.iter().cloned());
    args
}

/// [`GzUse::Remove`]: remove `component`.
pub fn remove_args(component: &str) -> Vec<String> {
    vec![
        "gz".into(),
        "remove".into(),
        component.to_string(),
        "--json".into(),
        "--inside-cn-agent".into(),
    ]
}

/// [`GzUse::Switch`]: `gz disable` with who, when and why (`Some`), or
/// `gz enable` (`None`).
pub fn switch_args(component: &str, disable: Option<(&str, &str, Option<&str>)>) -> Vec<String> {
    let mut args: Vec<String> = vec!["gz".into()];
    match disable {
        Some((by, at, reason)) => {
            args.extend(["disable".into(), component.to_string()]);
            args.extend(["--by".into(), by.to_string(), "--at".into(), at.to_string()]);
            if let Some(r) = reason {
                args.extend(["--reason".into(), r.to_string()]);
            }
        }
        None => args.extend(["enable".into(), component.to_string()]),
    }
    args.extend(["--json".into(), "--inside-cn-agent".into()]);
    args
}

/// [`GzUse::Health`]: the health gate of `component`.
pub fn health_args(component: &str, health: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "gz".into(),
        "health".into(),
        component.to_string(),
        "--json".into(),
    ];
    args.extend(health.iter().cloned());
    args
}

/// [`GzUse::Report`]: the server's own `server.agents`.
pub fn report_args() -> Vec<String> {
    ["gz", "report", "--json"].map(String::from).to_vec()
}

/// [`GzUse::Record`]: the bootstrapped copy records itself (SAPI instance,
/// CNAPI report); the image is already in place, so the installer only
/// adopts it.
pub fn record_args(image: ImageUuid) -> Vec<String> {
    vec![
        "gz".into(),
        "install".into(),
        image.to_string(),
        "--json".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Vec<String> {
        ["--min-healthy", "1", "--health-timeout", "2"]
            .map(String::from)
            .to_vec()
    }

    /// Every command line the builders make uses only the words of its
    /// kind, and every one of those is dated in the table.
    #[test]
    fn builders_send_only_dated_words_of_their_kind() {
        let image = ImageUuid::from_u128(1);
        let cases: Vec<(GzUse, Vec<String>)> = vec![
            (
                GzUse::Install,
                install_args(image, Some(Some(image)), &health()),
            ),
            (GzUse::Install, install_args(image, Some(None), &[])),
            (GzUse::Install, install_args(image, None, &health())),
            (
                GzUse::InstallTogether,
                install_together_args(
                    &[
                        ("sdcadm", image, Some(image)),
                        ("dockerlogger", image, None),
                    ],
                    &health(),
                ),
            ),
            (GzUse::Remove, remove_args("vm-agent")),
            (GzUse::Health, health_args("vm-agent", &health())),
            (GzUse::Health, health_args("vm-agent", &[])),
            (GzUse::Report, report_args()),
            (GzUse::Record, record_args(image)),
        ];
        for (kind, argv) in cases {
            for w in words_of(&argv) {
                assert!(kind.words().contains(&w), "{kind:?} sends {w} ({argv:?})");
                assert!(since(w).is_some(), "{w} is not in WORDS");
            }
        }
        for kind in [
            GzUse::Install,
            GzUse::InstallTogether,
            GzUse::Remove,
            GzUse::Health,
            GzUse::Report,
            GzUse::Record,
        ] {
            for w in kind.words() {
                assert!(since(w).is_some(), "{w} of {kind:?} is not in WORDS");
            }
        }
    }

    #[test]
    fn minimums_per_kind() {
        assert_eq!(GzUse::Install.needs(), FIRST_VERSIONED);
        assert_eq!(GzUse::Remove.needs(), FIRST_VERSIONED);
        assert_eq!(GzUse::Health.needs(), FIRST_VERSIONED);
        // What any agentsadm parses: a copy that says no version can report
        // itself and record a bootstrap.
        assert_eq!(GzUse::Report.needs(), BASELINE);
        assert_eq!(GzUse::Record.needs(), BASELINE);
        // `gz disable|enable` came with 0.2.0.
        assert_eq!(GzUse::Switch.needs(), SWITCHES);
        // Several components with their own expectations: 0.3.0; a 0.2.0
        // copy refuses the whole line (clap), so it is never sent one.
        assert_eq!(GzUse::InstallTogether.needs(), TOGETHER);
        let image = ImageUuid::from_u128(1);
        let together = install_together_args(
            &[("sdcadm", image, Some(image)), ("gz-tools", image, None)],
            &[],
        );
        let v020 = VersionKey::of("0.2.0-master-20261126T072930Z-g3df32ef").unwrap();
        let v030 = VersionKey::of("0.3.0-master-20261202T072930Z-g3df32ef").unwrap();
        assert_eq!(first_unknown(&together, Some(&v020)), Some("--expect"));
        assert_eq!(first_unknown(&together, Some(&v030)), None);
        assert_eq!(
            together[2..4],
            [image.to_string(), image.to_string()],
            "the images are the operands, in order"
        );
        assert!(together.contains(&format!("sdcadm={image}")));
        assert!(together.contains(&"gz-tools=none".to_string()));
        let on = switch_args("net-agent", None);
        let off = switch_args(
            "net-agent",
            Some(("root@hn", "2026-11-26T10:00:00Z", Some("RFD 58"))),
        );
        let v010 = VersionKey::of("0.1.0-master-20261126T072930Z-g3df32ef").unwrap();
        assert_eq!(first_unknown(&on, Some(&v010)), Some("enable"));
        assert_eq!(first_unknown(&off, Some(&v010)), Some("disable"));
        for w in words_of(&off) {
            assert!(GzUse::Switch.words().contains(&w), "{w}");
        }
    }

    #[test]
    fn an_old_or_unversioned_copy_refuses_newer_words() {
        let argv = install_args(ImageUuid::from_u128(1), Some(None), &[]);
        let old = VersionKey::of("0.0.9-master-20261101T000000Z-g0000000").unwrap();
        let new = VersionKey::of("0.1.0-master-20261126T072930Z-g3df32ef").unwrap();
        assert_eq!(first_unknown(&argv, Some(&old)), Some("--inside-cn-agent"));
        assert_eq!(first_unknown(&argv, None), Some("--inside-cn-agent"));
        assert_eq!(first_unknown(&argv, Some(&new)), None);
        let health = health_args("vm-agent", &[]);
        assert_eq!(first_unknown(&health, None), Some("health"));
        assert!(refusal(&health, "health").starts_with("error: unrecognized subcommand 'health'"));
        assert!(
            refusal(&argv, "--inside-cn-agent")
                .starts_with("error: unexpected argument '--inside-cn-agent' found")
        );
        assert_eq!(first_unknown(&report_args(), None), None);
        assert_eq!(
            first_unknown(&record_args(ImageUuid::from_u128(2)), None),
            None
        );
        // `--flag=value` is the flag; undated words are the binary's business.
        let argv: Vec<String> = ["gz", "install", "x", "--expect-current=none", "--root", "/"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            words_of(&argv),
            ["gz", "install", "--expect-current", "--root"]
        );
        assert_eq!(first_unknown(&argv, Some(&old)), Some("--expect-current"));
    }
}
