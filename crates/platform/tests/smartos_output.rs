//! The parsers the SmartOS platform runs over `sysinfo`, `svcs`, `ps` and
//! `ctstat` output, checked on any host against fixture text in the shape
//! the real commands print (`fixtures/smartos/`): the illumos build
//! compiles the code that runs those commands, these tests what it makes
//! of their output.

use agentsadm_platform::ServiceState;
use agentsadm_platform::smartos::{contract_service, parse_ctid, parse_sysinfo};

fn fixture(name: &str) -> String {
    let path = format!("{}/fixtures/smartos/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn sysinfo_of_a_headnode_a_compute_node_and_a_mockcloud_server() {
    let hn = parse_sysinfo(fixture("sysinfo-headnode.json").as_bytes()).unwrap();
    assert_eq!(hn.uuid.to_string(), "0e8ab6c2-5a3e-11e9-8c31-ac1f6b4d0a2e");
    assert_eq!(hn.hostname, "headnode");
    assert!(
        hn.headnode,
        "Boot Parameters.headnode is the string \"true\""
    );

    // A CN booted over iPXE has no `headnode` boot parameter at all.
    let cn = parse_sysinfo(fixture("sysinfo-cn.json").as_bytes()).unwrap();
    assert_eq!(cn.hostname, "cn0042");
    assert!(!cn.headnode);

    // Not set up yet: no hostname, but the UUID is there.
    let fresh = parse_sysinfo(fixture("sysinfo-cn-unsetup.json").as_bytes()).unwrap();
    assert_eq!(fresh.hostname, "");
    assert!(!fresh.headnode);

    let mock = parse_sysinfo(fixture("sysinfo-mockcloud.json").as_bytes()).unwrap();
    assert!(!mock.headnode, "\"false\" is not a headnode");
    assert_eq!(mock.hostname, "mock-a1b2c3");
}

#[test]
fn sysinfo_that_cannot_be_read_says_why() {
    assert!(parse_sysinfo(b"sysinfo: cache is being rebuilt\n").is_err());
    let err = parse_sysinfo(br#"{"Hostname": "cn0001"}"#).unwrap_err();
    assert!(err.contains("no UUID"), "{err}");
    let err = parse_sysinfo(br#"{"UUID": "not-a-uuid"}"#).unwrap_err();
    assert!(err.contains("no UUID"), "{err}");
}

#[test]
fn svcs_states_including_transitions_and_legacy_services() {
    let want = [
        ("svc:/smartdc/agent/cn-agent:default", ServiceState::Online),
        // `*`: in transition. Not yet online: the health gate keeps waiting.
        (
            "svc:/smartdc/agent/vm-agent:default",
            ServiceState::Other("online*".into()),
        ),
        (
            "svc:/smartdc/agent/net-agent:default",
            ServiceState::Offline,
        ),
        (
            "svc:/smartdc/agent/cmon-agent:default",
            ServiceState::Other("offline*".into()),
        ),
        (
            "svc:/smartdc/agent/firewaller:default",
            ServiceState::Disabled,
        ),
        (
            "svc:/smartdc/agent/hagfish-watcher:default",
            ServiceState::Maintenance,
        ),
        (
            "svc:/smartdc/agent/smartlogin:default",
            ServiceState::Degraded,
        ),
        (
            "svc:/smartdc/application/config-agent:default",
            ServiceState::Uninitialized,
        ),
        (
            "lrc:/etc/rc2_d/S20sysetup",
            ServiceState::Other("legacy_run".into()),
        ),
    ];
    let text = fixture("svcs-state.txt");
    let lines: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(char::is_whitespace).expect("state and FMRI"))
        .collect();
    assert_eq!(lines.len(), want.len());
    for ((state, fmri), (want_fmri, want_state)) in lines.into_iter().zip(want) {
        assert_eq!(fmri.trim(), want_fmri);
        // `svcs -H -o state FMRI` prints the column alone, with its newline.
        let parsed = ServiceState::parse(&format!("{state}\n"));
        assert_eq!(parsed, want_state, "{fmri}");
        assert_eq!(parsed.as_str(), state);
        assert_eq!(parsed.is_enabled(), state != "disabled", "{fmri}");
    }
}

#[test]
fn the_service_of_a_process_contract() {
    assert_eq!(
        contract_service(&fixture("ctstat-v-cn-agent.txt")).as_deref(),
        Some("svc:/smartdc/agent/cn-agent:default")
    );
    // `service fmri ctid:` is another key, never taken for the FMRI.
    assert_eq!(
        contract_service(&fixture("ctstat-v-ssh.txt")).as_deref(),
        Some("svc:/network/ssh:default")
    );
    let header_only: String = fixture("ctstat-v-cn-agent.txt")
        .lines()
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(contract_service(&header_only), None);
}

#[test]
fn the_contract_id_ps_prints() {
    assert_eq!(parse_ctid(&fixture("ps-ctid.txt")), Some(61));
    assert_eq!(parse_ctid("-\n"), None);
    assert_eq!(parse_ctid(""), None);
    assert_eq!(parse_ctid("61 62\n"), None);
}
