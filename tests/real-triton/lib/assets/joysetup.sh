#!/bin/bash
# joysetup.sh as the assets stand-in serves it: the harness's mock server has no
# disks, so of the real script (sdc-headnode scripts/joysetup.sh: zpool, datasets,
# configs) only what the agents step needs is done: create_setup_file
# computenode (/var/lib/setup.json, which agentsetup.sh requires) and node.config
# in place. It runs through Ur in the server's mount namespace (/var and /opt
# are the server's own there).
set -o errexit
# /var/svc exists on every SmartOS GZ (touch_setup_complete writes there)
mkdir -p /var/lib /var/svc /opt/smartdc/config
if [[ ! -f /var/lib/setup.json ]]; then
  printf '{"node_type":"computenode","start_time":"%s","current_state":"imgadm_setup","seen_states":["zpool_created","datasets_setup","configs_installed","imgadm_setup"],"complete":false}\n' \
    "$(date -u +%FT%TZ)" > /var/lib/setup.json
fi
[[ -f /var/tmp/node.config/node.config ]] && cp /var/tmp/node.config/node.config /opt/smartdc/config/node.config
echo "joysetup (harness stand-in): done"
