#!/usr/bin/env bash
# boot.sh UUID: what a mock server's platform does when it boots again after
# ur-agent exited on a reboot request (exit 113). Its sysinfo gets a new Boot
# Time (CNAPI's last_boot, which server-setup's wait_for_reboot watches) and
# says "Setup" as the server's /var/lib/setup.json says "complete" (SmartOS
# sysinfo reads it there). After a factory reset (the zfs stand-in's marker)
# the global zone comes back empty: no /var, /opt or agents, not set up.
set -euo pipefail
U=$1; V="$RT_UR/var-$U/upper"; M="$MOCKCLOUD_ROOT/servers/$U"
setup=
if [ -e "$V/.rt-factoryreset" ]; then
  rm -rf "$RT_UR/var-$U" "$RT_UR/opt-$U" "$RT_UR/sbin-$U" "$M/agents" "$M/.agentsadm"
  mkdir -p "$M/agents"
  setup=false
elif [ -f "$V/lib/setup.json" ]; then
  setup=$(python3 -c 'import json,sys; print("true" if json.load(open(sys.argv[1])).get("complete") else "false")' "$V/lib/setup.json")
fi
python3 - "$M/sysinfo.json" "$setup" <<'PY'
import json, sys, time
path, setup = sys.argv[1], sys.argv[2]
s = json.load(open(path))
s["Boot Time"] = str(int(time.time()))
if setup:
    s["Setup"] = setup
json.dump(s, open(path + ".new", "w"), indent=2)
PY
mv "$M/sysinfo.json.new" "$M/sysinfo.json"
echo "booted $(date -u +%T) setup=${setup:-unchanged}" >> "$RT_UR/$U/boots.log"
