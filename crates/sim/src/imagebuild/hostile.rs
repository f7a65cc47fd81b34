//! Hook bodies of hostile packages, for the tests that check a hostile
//! hook changes nothing it does not own (issue 22).

use std::path::Path;

/// A hook body that starts three processes that leave the hook's process
/// group, then touches `started` and runs `then`:
/// - `setsid`: a new session (`setsid(2)`);
/// - `setpgid`: its own process group (bash job control, `setpgid(2)`);
/// - `daemon`: the classic double fork (`setsid`, fork, the middle
///   process exits, so the writer is orphaned in a session of its own).
///
/// Each writes its pid to `<started>.<how>`, waits (at most 60 s) for the
/// file `go` to exist, then writes `late-<how>` into the package's
/// installed directory and into apm's `etc` every 0.2 s for 30 s: what
/// the tree a rollback restored would see if it outlived the hook. The
/// test creates `go` once the command has returned, so whether anything
/// is written depends on nothing but whether the writer is still alive.
pub fn escaping_children(started: &Path, go: &Path, then: &str) -> String {
    let started = started.display();
    let go = go.display();
    format!(
        r#"export agent_tree="$npm_config_prefix/lib/node_modules/$npm_package_name"
export agent_started='{started}'
export agent_go='{go}'
writer() {{
    echo $BASHPID > "$agent_started.$1"
    for i in $(seq 1200); do [ -e "$agent_go" ] && break; sleep 0.05; done
    for i in $(seq 150); do
        echo late > "$agent_tree/late-$1" 2>/dev/null
        echo late > "$npm_config_etc/late-$1" 2>/dev/null
        sleep 0.2
    done
}}
export -f writer
setsid bash -c 'writer setsid' </dev/null >/dev/null 2>&1 &
set -m
(writer setpgid) </dev/null >/dev/null 2>&1 &
set +m
setsid bash -c '(writer daemon) &' </dev/null >/dev/null 2>&1
for how in setsid setpgid daemon; do
    while [ ! -s "$agent_started.$how" ]; do sleep 0.05; done
done
touch "$agent_started"
{then}"#
    )
}

/// The pids [`escaping_children`] wrote next to `started`.
pub fn escaped_pids(started: &Path) -> Vec<i32> {
    ["setsid", "setpgid", "daemon"]
        .iter()
        .filter_map(|how| {
            let file = format!("{}.{how}", started.display());
            std::fs::read_to_string(file).ok()?.trim().parse().ok()
        })
        .collect()
}

/// A postinstall body (run after the package's own rendering) that writes
/// `file` into apm's SMF directory as a manifest declaring `service`
/// (`smartdc/agent/net-agent`), with a default instance enabled.
pub fn writes_manifest(file: &str, service: &str) -> String {
    format!(
        r#"mkdir -p "$(dirname "$npm_config_smfdir/{file}")"
cat > "$npm_config_smfdir/{file}" <<'AGENTSADM_XML'
<?xml version="1.0"?>
<!DOCTYPE service_bundle SYSTEM "/usr/share/lib/xml/dtd/service_bundle.dtd.1">
<service_bundle type="manifest" name="{service}">
  <service name="{service}" type="service" version="1">
    <create_default_instance enabled="true"/>
    <exec_method type="method" name="start" exec="/bin/true" timeout_seconds="10"/>
    <exec_method type="method" name="stop" exec=":kill" timeout_seconds="10"/>
  </service>
</service_bundle>
AGENTSADM_XML"#
    )
}
