#!/bin/bash
#
# headnode-agents.sh: the agents steps of headnode setup, called by
# headnode.sh in place of running the agentsshar and adopt_agents.
#
#   headnode-agents.sh install   before any zone exists (headnode.sh's
#                                "Agents install" step): install agentsadm
#                                from the USB key, then the headnode's default
#                                set from the per-component image directory,
#                                with no API at all (--no-sapi --no-cnapi);
#                                each component keeps its instance UUID.
#   headnode-agents.sh adopt     once SAPI (proto mode) and binder run, where
#                                adopt_agents ran: create the agent services
#                                SAPI lacks, set each service's
#                                params.image_uuid to what the headnode
#                                installed (what new servers get), and create
#                                the headnode's instances with
#                                params.server_uuid and params.image_uuid.
#   headnode-agents.sh import    once IMGAPI runs (next to
#                                import_smartdc_service_images): import the
#                                default images into IMGAPI, so compute node
#                                setup (`gz setup --source imgapi`) finds them.
#
# Every step is idempotent; headnode.sh may run them again after a failure.
#
# Environment:
#   AGENTS_DIR        the image directory (default /usbkey/extra/agents)
#   AGENTSADM_SRC     agentsadm on the USB key
#                     (default /usbkey/extra/agentsadm/agentsadm)
#   AGENTSADM_ROOT    the global zone root (default /; a directory in tests)
#   SAPI_URL, IMGAPI_URL
#                     API URLs (default: from /lib/sdc/config.sh)
#

set -o errexit
set -o pipefail
set -o nounset

ROOT=${AGENTSADM_ROOT:-/}
P=${ROOT%/}
AGENTS_DIR=${AGENTS_DIR:-/usbkey/extra/agents}
AGENTSADM_SRC=${AGENTSADM_SRC:-/usbkey/extra/agentsadm/agentsadm}
AGENTSADM=$P/opt/smartdc/agentsadm/bin/agentsadm

usage() {
    echo "usage: $(basename "$0") install|adopt|import" >&2
    exit 1
}

fatal() {
    echo "headnode-agents: error: $*" >&2
    exit 1
}

install_agentsadm() {
    [[ -x $AGENTSADM_SRC ]] || fatal "$AGENTSADM_SRC is missing from the USB key"
    if [[ -x $AGENTSADM ]] && cmp -s "$AGENTSADM_SRC" "$AGENTSADM"; then
        return
    fi
    mkdir -p "$(dirname "$AGENTSADM")"
    cp "$AGENTSADM_SRC" "$AGENTSADM.new"
    chmod 0755 "$AGENTSADM.new"
    mv -f "$AGENTSADM.new" "$AGENTSADM"
}

[[ $# -eq 1 ]] || usage
case $1 in
install)
    install_agentsadm
    [[ -f $AGENTS_DIR/index.json ]] ||
        fatal "$AGENTS_DIR/index.json is missing (the USB key has no per-component agent images)"
    "$AGENTSADM" gz setup --root "$ROOT" --headnode --no-sapi --no-cnapi \
        --source "$AGENTS_DIR" ||
        fatal "installing the agents failed; fix the cause and run headnode setup again"
    ;;
adopt)
    [[ -x $AGENTSADM ]] || fatal "$AGENTSADM is missing: run '$0 install' first"
    # -y: headnode setup runs unattended (adopt asks without it).
    "$AGENTSADM" adopt --local --root "$ROOT" -y ||
        fatal "adopting the headnode's agents into SAPI failed"
    ;;
import)
    [[ -x $AGENTSADM ]] || fatal "$AGENTSADM is missing: run '$0 install' first"
    "$AGENTSADM" installer import "$AGENTS_DIR" ||
        fatal "importing the agent images into IMGAPI failed"
    ;;
*)
    usage
    ;;
esac
