#!/bin/bash
#
# agentsetup.sh: the agents step of compute node setup (CNAPI's server-setup
# workflow runs it with ASSETS_URL set), replacing the script that
# downloaded and ran the agentsshar.
#
# 1. Fetch the agentsadm binary from the assets zone (curl -f: an HTTP error
#    page is never saved and run). `agentsadm self-update` on the headnode
#    keeps that copy (/usbkey/extra/agentsadm/agentsadm) and the SAPI
#    agentsadm service's image current, so step 3 then installs the same
#    agentsadm from its image, recorded like every component.
# 2. gz-tools from cn_tools.tar.gz (setup state "tools_installed").
# 3. `agentsadm gz setup --source imgapi`: installs each component's default
#    image (its SAPI agent service's params.image_uuid) from IMGAPI, in
#    order (agents_core, config-agent, the rest, cn-agent last), adopts each
#    instance into SAPI with params.server_uuid and params.image_uuid, and
#    reports the installed set to CNAPI (server.agents). Setup state
#    "agents_installed".
# 4. Mark the setup complete (setup.json complete=true, sysinfo -u).
#
# Each step is skipped when its setup state is already recorded, so a
# re-run after a failure continues where it stopped; `gz setup` itself is
# idempotent (installed images are left alone).
#
# Environment (everything but ASSETS_URL has a default for a real CN):
#   ASSETS_URL          the assets zone, e.g. http://10.99.99.8 (required)
#   AGENTSADM_ROOT      the global zone root (default /; a directory in tests)
#   AGENTSADM_URL       where to fetch agentsadm
#                       (default $ASSETS_URL/extra/agentsadm/agentsadm)
#   SAPI_URL, IMGAPI_URL, CNAPI_URL
#                       API URLs; by default agentsadm derives them from the
#                       SDC config (node.config: sapi_domain, imgapi_domain,
#                       datacenter_name + dns_domain)
#

set -o errexit
set -o pipefail
set -o nounset

ROOT=${AGENTSADM_ROOT:-/}
# Paths below are "$P/opt/...": P is empty for /.
P=${ROOT%/}
: "${ASSETS_URL:?ASSETS_URL must name the assets zone, e.g. http://10.99.99.8}"
ASSETS_URL=${ASSETS_URL%/}
AGENTSADM_URL=${AGENTSADM_URL:-$ASSETS_URL/extra/agentsadm/agentsadm}
AGENTSADM=$P/opt/smartdc/agentsadm/bin/agentsadm
SETUP_FILE=$P/var/lib/setup.json
LOG=$P/var/log/agent-setup.log
CURL=(curl -fsS --connect-timeout 10 --retry 5 --retry-delay 2)

mkdir -p "$(dirname "$LOG")"
# Everything goes to the log too; stdout and stderr stay apart for the caller.
exec > >(tee -a "$LOG") 2> >(tee -a "$LOG" >&2)

TMP=$(mktemp -d "${TMPDIR:-/var/tmp}/agentsetup.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

log() {
    printf '%s agentsetup: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

fatal() {
    log "error: $*" >&2
    exit 1
}

state_has() {
    "$AGENTSADM" installer state --root "$ROOT" has "$1"
}

state_add() {
    "$AGENTSADM" installer state --root "$ROOT" add "$1" ||
        fatal "cannot record setup state $1 in $SETUP_FILE"
}

fetch_agentsadm() {
    log "fetching agentsadm from $AGENTSADM_URL"
    mkdir -p "$(dirname "$AGENTSADM")"
    "${CURL[@]}" -o "$TMP/agentsadm" "$AGENTSADM_URL" ||
        fatal "cannot download agentsadm from $AGENTSADM_URL (is it on the USB key under extra/agentsadm/?)"
    chmod 0755 "$TMP/agentsadm"
    "$TMP/agentsadm" --version >/dev/null 2>&1 ||
        fatal "the agentsadm downloaded from $AGENTSADM_URL does not run on this server"
    # Same filesystem as the target: the rename is atomic.
    cp "$TMP/agentsadm" "$AGENTSADM.new"
    mv -f "$AGENTSADM.new" "$AGENTSADM"
}

setup_tools() {
    if state_has tools_installed; then
        log "gz-tools already installed"
        return
    fi
    log "installing gz-tools (cn_tools.tar.gz)"
    "${CURL[@]}" -o "$TMP/cn_tools.tar.gz" "$ASSETS_URL/extra/joysetup/cn_tools.tar.gz" ||
        fatal "cannot download $ASSETS_URL/extra/joysetup/cn_tools.tar.gz"
    mkdir -p "$P/opt/smartdc"
    tar xzof "$TMP/cn_tools.tar.gz" -C "$P/opt/smartdc" ||
        fatal "cannot unpack cn_tools.tar.gz into $P/opt/smartdc"
    # Refresh the USB key's boot files (only on the real GZ).
    if [[ -z $P && -x /opt/smartdc/bin/sdc-usbkey ]]; then
        /opt/smartdc/bin/sdc-usbkey -v update --ignore-missing ||
            fatal "sdc-usbkey update failed"
    fi
    state_add tools_installed
}

setup_agents() {
    if state_has agents_installed; then
        log "agents already installed"
        return
    fi
    if [[ -z $P && $(uname -s) == Linux && -x /usr/triton/bin/install-default-agents ]]; then
        # Linux compute nodes keep their own installer.
        /usr/triton/bin/install-default-agents ||
            fatal "install-default-agents failed"
    else
        log "installing the default agents from IMGAPI (SAPI service defaults)"
        "$AGENTSADM" gz setup --root "$ROOT" --source imgapi ||
            fatal "agentsadm gz setup failed (see above); fix the cause and run this script again"
        # gz setup reports too; this makes sure CNAPI has the final set even
        # if that report was lost (cn-agent also reports when it starts).
        "$AGENTSADM" gz report --root "$ROOT" --post >/dev/null ||
            log "warning: could not report the agents to CNAPI; cn-agent reports them when it starts"
    fi
    state_add agents_installed
}

mark_as_setup() {
    "$AGENTSADM" installer state --root "$ROOT" complete ||
        fatal "cannot mark $SETUP_FILE complete"
    if [[ -z $P ]] && command -v sysinfo >/dev/null 2>&1; then
        sysinfo -u || log "warning: sysinfo -u failed"
    fi
}

[[ -f $SETUP_FILE ]] || fatal "$SETUP_FILE does not exist (joysetup.sh creates it)"
fetch_agentsadm
setup_tools
setup_agents
mark_as_setup
log "done"
exit 0
