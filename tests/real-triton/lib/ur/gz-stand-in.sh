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
#   readopt         as real, but before each `gz install` the server's vm-agent
#                   instance is adopted again bare in SAPI, as vm-agent's and
#                   net-agent's postinstalls do (ur/readopt.py)
#   rooted          every `gz` command acts on a Triton global zone in a
#                   directory ($STATE/gz, smartdc layout, rooted platform):
#                   the images' lifecycle scripts run, SMF is a file
#   reboot-mid-setup  once: `gz setup` runs the real installer, stopped at its
#                   `after-adopt` test checkpoint (the first fresh install has
#                   written its SAPI instance and not committed), and there the
#                   server "reboots": the installer and ur-agent are killed
#                   (SIGKILL); the mode goes back to real
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
if [ "$mode" = readopt ] && [ "${1:-}" = gz ] && [ "${2:-}" = install ]; then
  python3 "$RTLIB/ur/readopt.py" "$SAPI" "$CNAPI" "$SERVER" vm-agent >> "$STATE/readopts.log" 2>&1
fi
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
gz=("$AGENTSADM" "${api[@]}" gz --layout mockcloud --root "$MOCKCLOUD" --server-uuid "$SERVER" "${args[@]}")
if [ "$mode" = rooted ]; then
  # A Triton global zone in a directory ($STATE/gz): the smartdc layout on the
  # rooted platform, where the images' lifecycle scripts run for real and SMF
  # is a file of its own. Made, not set up, on first use.
  G="$STATE/gz"
  if [ ! -f "$G/sysinfo.json" ]; then
    mkdir -p "$G/opt/smartdc/agents/.agentsadm" "$G/var/svc"
    echo '{"services": {}}' > "$G/var/svc/smf-state.json"
    printf '{"UUID": "%s", "Hostname": "rooted-%s", "Boot Parameters": {"headnode": "false"}, "Setup": "false", "System Type": "SunOS"}\n' \
      "$SERVER" "${SERVER:0:8}" > "$G/sysinfo.json"
  fi
  gz=("$AGENTSADM" "${api[@]}" gz --root "$G" --server-uuid "$SERVER" "${args[@]}")
fi
if [ "$mode" = reboot-mid-setup ] && [ "${args[0]:-}" = setup ]; then
  echo real > "$STATE/mode"
  # The installer stops at its own test checkpoint right after the first
  # fresh install recorded its SAPI instance and before that install commits
  # (AGENTSADM_TEST_CRASH_AT=wait:after-adopt), so the reboot lands inside an
  # install every time, at the point where a rollback leaves a SAPI record
  # behind. Its stderr still reaches agentsetup.sh's log.
  log="$STATE/reboot-setup.stderr"; : > "$log"
  AGENTSADM_TEST_CRASH_AT=wait:after-adopt "${gz[@]}" 2> >(tee -a "$log" >&2) & installer=$!
  for _ in $(seq 1 6000); do
    grep -q 'checkpoint after-adopt reached' "$log" && break
    kill -0 "$installer" 2> /dev/null || break
    sleep 0.1
  done
  where=$(grep -c 'checkpoint after-adopt reached' "$log")
  # the reboot: the installer and ur-agent (the ancestor running ur-run.js) die at once
  p=$$
  while [ "$p" -gt 1 ] && ! grep -q ur-run.js "/proc/$p/cmdline" 2> /dev/null; do
    p=$(awk '{print $4}' "/proc/$p/stat")
  done
  echo "$(date -u +%FT%T.%3NZ) reboot mid-setup: installer $installer (at after-adopt: $where), ur-agent $p" >> "$STATE/calls.log"
  kill -9 "$installer" "$p" 2> /dev/null
  exit 113
fi
exec "${gz[@]}"
