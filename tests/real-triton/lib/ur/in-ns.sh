#!/usr/bin/env bash
# in-ns.sh SERVER_UUID CMD...: runs CMD (ur-agent) inside the private mount
# namespace `unshare -m --propagation private` made for it, where the mock
# server's global zone paths exist without touching this machine's:
#  - /opt is $RT_UR/opt-<uuid>: /opt/smartdc/agentsadm/bin/agentsadm is
#    gz-stand-in.sh (or whatever the agentsadm bootstrap installed there);
#  - /lib/sdc/config.sh (an overlay on /usr/lib) gives imgapi_domain and the
#    datacenter name, as on a CN.
set -euo pipefail
U=$1; shift
OPT="$RT_UR/opt-$U"; CONF="$OPT/smartdc/.rt"
mkdir -p "$OPT/smartdc/agentsadm/bin" "$CONF" "$RT_UR/$U"
{
  echo "SERVER=$U"; echo "STATE=$RT_UR/$U"; echo "MOCKCLOUD=$MOCKCLOUD_ROOT"; echo "RTLIB=$RT_LIB"
  echo "AGENTSADM=${RT_STAND_IN_DELEGATE-$AGENTSADM}"
  echo "IMGAPI=$IMGAPI_URL"; echo "SAPI=$SAPI_URL"; echo "CNAPI=http://127.0.0.1:$CNAPI_PORT"
} > "$CONF/env"
if [ "${RT_FRESH_OPT:-0}" = 1 ] || [ ! -e "$OPT/smartdc/agentsadm/image_uuid" ]; then
  rm -f "$OPT/smartdc/agentsadm/image_uuid"
  install -m 755 "$RT_LIB/ur/gz-stand-in.sh" "$OPT/smartdc/agentsadm/bin/agentsadm"
fi
mount --bind "$OPT" /opt
L="$RT_UR/lib-$U"; rm -rf "$L/work"; mkdir -p "$L/upper/sdc" "$L/work"
printf 'load_sdc_config() {\n    CONFIG_imgapi_domain=127.0.0.1:%s\n    CONFIG_datacenter_name=%s\n}\n' "$IMGAPI_PORT" "$RT_DC" > "$L/upper/sdc/config.sh"
mount -t overlay "rt-$U" -o "lowerdir=/usr/lib,upperdir=$L/upper,workdir=$L/work" /usr/lib
# /var is the server's own (setup state, /var/tmp, logs: what CNAPI's setup
# and factory-reset jobs write), /usr/sbin/zfs answers the factory reset and
# /usr/sbin/svcs sdcadm's health checks (ur/svcs).
V="$RT_UR/var-$U"; rm -rf "$V/work"; mkdir -p "$V/upper" "$V/work"
mount -t overlay "rt-var-$U" -o "lowerdir=/var,upperdir=$V/upper,workdir=$V/work" /var
Z="$RT_UR/sbin-$U"; rm -rf "$Z/work"; mkdir -p "$Z/upper" "$Z/work"
install -m 755 "$RT_LIB/ur/zfs" "$Z/upper/zfs"
install -m 755 "$RT_LIB/ur/svcs" "$Z/upper/svcs"  # what sdcadm check-health asks Ur to run
mount -t overlay "rt-sbin-$U" -o "lowerdir=/usr/sbin,upperdir=$Z/upper,workdir=$Z/work" /usr/sbin
exec "$@"
