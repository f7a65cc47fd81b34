#!/usr/bin/env bash
# in-ns.sh HEADNODE ARGS...: the real sdcadm (its lib/cli, unedited) as a
# headnode's global zone runs it, inside the private mount namespace
# `unshare -m --propagation private` made for it. HEADNODE is the mock
# server that plays the headnode. There:
#  - /lib/sdc/config.sh -json (how sdcadm reads the datacenter's config)
#    names this harness's datacenter, DNS domain and rabbitmq (real Ur: its
#    commands reach the ur-agents of the mock servers);
#  - /usr/bin/sysinfo gives HEADNODE's UUID and /usr/bin/svcs is ur/svcs for
#    it;
#  - /var is its own: /var/sdcadm/sdcadm.conf points sdcadm at the
#    simulator's updates server, its lock and logs stay out of this machine's.
# The API names sdcadm builds (sapi.<dc>.<dns>, ...) reach their loopback
# ports through preload.js, as binder would answer them.
set -euo pipefail
H=$1; shift
N="$RT_ROOT/sdcadm-gz"
for d in lib bin var; do rm -rf "${N:?}/$d/work"; mkdir -p "$N/$d/upper" "$N/$d/work"; done
mkdir -p "$N/lib/upper/sdc" "$N/var/upper/sdcadm" "$N/var/upper/log/sdcadm/logs"
cat > "$N/lib/upper/sdc/config.sh" <<CONF
#!/bin/bash
# the harness's datacenter, as /lib/sdc/config.sh -json prints a headnode's
[ "\${1:-}" = -json ] || { echo "config.sh (harness stand-in): only -json" >&2; exit 1; }
cat <<'JSON'
{"datacenter_name": "$RT_DC", "dns_domain": "$RT_DNS", "admin_ip": "127.0.0.1",
 "assets_admin_ip": "127.0.0.1", "ufds_admin_uuid": "930896af-bf8c-48d4-885c-6573a94b1853",
 "ufds_ldap_root_dn": "cn=root", "ufds_ldap_root_pw": "secret",
 "rabbitmq": "guest:guest:127.0.0.1:$AMQP_PORT", "rabbitmq_domain": "127.0.0.1",
 "datacenter_location": "loopback", "datacenter_company_name": "agentsadm harness"}
JSON
CONF
printf '#!/bin/bash\necho %s\n' "'{\"UUID\": \"$H\", \"Hostname\": \"headnode\", \"Boot Parameters\": {\"headnode\": \"true\"}}'" > "$N/bin/upper/sysinfo"
install -m 755 "$RT_LIB/ur/svcs" "$N/bin/upper/svcs"
chmod 755 "$N/lib/upper/sdc/config.sh" "$N/bin/upper/sysinfo"
echo "{\"updatesServerUrl\": \"$UPDATES_URL\"}" > "$N/var/upper/sdcadm/sdcadm.conf"
mount -t overlay rt-sdcadm-lib -o "lowerdir=/usr/lib,upperdir=$N/lib/upper,workdir=$N/lib/work" /usr/lib
mount -t overlay rt-sdcadm-bin -o "lowerdir=/usr/bin,upperdir=$N/bin/upper,workdir=$N/bin/work" /usr/bin
mount -t overlay rt-sdcadm-var -o "lowerdir=/var,upperdir=$N/var/upper,workdir=$N/var/work" /var
export RT_SVCS_SERVER=$H RT_SVCS_MOCKCLOUD=$MOCKCLOUD_ROOT RT_SVCS_CATALOG="$RT_HOME/../../manifests/components.json"
cd "$RT_SRC/sdcadm"
exec node --require "$RT_LIB/node/preload.js" lib/cli/index.js "$@"
