#!/bin/bash
# /opt/smartdc/agentsadm/bin/agentsadm as the scripts ur-agent runs see it (in
# the mount namespace of in-ns.sh). It appends each call (arguments and
# environment) to $STATE/calls.log and acts by $STATE/mode:
#   real (default)  `gz health`: a healthy result; every other `gz` command: the
#                   real agentsadm installer on this mock server (mockcloud
#                   layout under $MOCKCLOUD), with the harness's API URLs
#   unhealthy       `gz health` reports the step "unhealthy" and exits 1
#   exit:N          exits N at once (e.g. exit:113, the reboot request)
#   silent          prints nothing and exits 0 (no result document)
#   slow:N          waits N seconds, then as real
# The bootstrap packs this same file as an agentsadm image (run.sh).
# shellcheck source=/dev/null # written by in-ns.sh
. /opt/smartdc/.rt/env
echo "$(date -u +%FT%T.%3NZ) argv=[$*] path=[$PATH] env=[$(env | sort | tr '\n' ' ')]" >> "$STATE/calls.log"
if [ "${1:-}" = --version ]; then echo "agentsadm 0.0.0 (real-triton stand-in)"; exit 0; fi
mode=$(cat "$STATE/mode" 2>/dev/null || echo real)
result() { printf '{"server_uuid":"%s","components":[]%s}\n' "$SERVER" "${1:-}"; }
case "$mode" in
  unhealthy) if [ "${2:-}" = health ]; then result ',"error":{"step":"unhealthy","message":"stand-in: unhealthy"}'; exit 1; fi ;;
  exit:*) exit "${mode#exit:}" ;;
  silent) exit 0 ;;
  slow:*) sleep "${mode#slow:}" ;;
esac
api=(--imgapi-url "$IMGAPI" --sapi-url "$SAPI" --cnapi-url "$CNAPI")
# `installer state` (agentsetup.sh's setup state) is the server's own /var/lib/setup.json
if [ "${1:-}" = installer ] && [ -n "$AGENTSADM" ]; then exec "$AGENTSADM" "${api[@]}" "$@"; fi
if [ "${1:-}" != gz ] || [ "${2:-}" = health ] || [ -z "$AGENTSADM" ]; then result; exit 0; fi
shift
# The mock server's global zone is its mockcloud directory: drop a --root the caller gave.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --root) shift 2 ;;
    --root=*) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
exec "$AGENTSADM" "${api[@]}" gz --layout mockcloud --root "$MOCKCLOUD" --server-uuid "$SERVER" "${args[@]}"
