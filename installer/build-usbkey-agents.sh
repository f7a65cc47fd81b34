#!/bin/bash
#
# build-usbkey-agents.sh: put the agents on a USB key image, replacing the
# agentsshar. Run by the headnode build (sdc-headnode build-tar-image) with
# the stage's `extra` directory, which becomes /usbkey/extra:
#
#   EXTRA/agents/<name>/<uuid>.manifest   per-component images (IMGAPI
#   EXTRA/agents/<name>/<uuid>.file       manifest + file, as published)
#   EXTRA/agents/index.json               the default image per component
#   EXTRA/agentsadm/agentsadm             the agentsadm binary for the GZ
#   EXTRA/agents/agents-*.sh, latest      with -s: an agentsshar for old
#                                         tooling (see installer/README.md)
#
# usage: build-usbkey-agents.sh [-A BUILD_AGENTSADM] [-a GZ_AGENTSADM]
#            [-s SHAR] [-d IMAGE_UUID]... EXTRA_DIR IMAGE_FILE...
#
#   -A  the agentsadm that runs here to build the directory (default:
#       agentsadm in PATH)
#   -a  the agentsadm to put on the key for the global zones
#   -s  an agentsshar to keep for old tooling; `latest` points at it
#   -d  make this image its component's default (otherwise the newest)
#
# Every image file is checked (catalog component, type "other", size and
# sha1 as its manifest says) before anything is written.
#

set -o errexit
set -o pipefail
set -o nounset

BUILD_AGENTSADM=agentsadm
GZ_AGENTSADM=
SHAR=
DEFAULTS=()

usage() {
    echo "usage: $(basename "$0") [-A BUILD_AGENTSADM] [-a GZ_AGENTSADM] [-s SHAR] [-d IMAGE_UUID]... EXTRA_DIR IMAGE_FILE..." >&2
    exit 1
}

fatal() {
    echo "build-usbkey-agents: error: $*" >&2
    exit 1
}

while getopts "A:a:s:d:h" opt; do
    case $opt in
    A) BUILD_AGENTSADM=$OPTARG ;;
    a) GZ_AGENTSADM=$OPTARG ;;
    s) SHAR=$OPTARG ;;
    d) DEFAULTS+=(--default "$OPTARG") ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -ge 2 ]] || usage
EXTRA=$1
shift

command -v "$BUILD_AGENTSADM" >/dev/null 2>&1 ||
    fatal "cannot run $BUILD_AGENTSADM (pass -A with the path of an agentsadm that runs here)"
if [[ -n $GZ_AGENTSADM && ! -f $GZ_AGENTSADM ]]; then
    fatal "$GZ_AGENTSADM does not exist"
fi

args=(installer build --out "$EXTRA/agents")
if [[ ${#DEFAULTS[@]} -gt 0 ]]; then
    args+=("${DEFAULTS[@]}")
fi
if [[ -n $SHAR ]]; then
    args+=(--shar "$SHAR")
fi
"$BUILD_AGENTSADM" "${args[@]}" "$@"

if [[ -n $GZ_AGENTSADM ]]; then
    mkdir -p "$EXTRA/agentsadm"
    cp "$GZ_AGENTSADM" "$EXTRA/agentsadm/agentsadm.new"
    chmod 0755 "$EXTRA/agentsadm/agentsadm.new"
    mv -f "$EXTRA/agentsadm/agentsadm.new" "$EXTRA/agentsadm/agentsadm"
fi
