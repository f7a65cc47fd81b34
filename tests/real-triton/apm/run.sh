#!/usr/bin/env bash
# The apm differential: the same five real agent packages (agents_core,
# config-agent, vm-agent, net-agent, cn-agent, built from the public sources
# as each Makefile's release target lays them out) installed, upgraded and
# removed with apm (agents_core's bin/apm.js) on one server root and with
# `agentsadm gz` on another, 16 steps (the last two install four agents in
# one command each side). After each step it compares the trees
# under /opt/smartdc/agents, the SMF services the hooks left, and the
# commands each package hook ran; it prints each tool's time per step.
# Differences agentsadm makes on purpose are printed as `known:` (compare.py).
#
#   AGENTSADM=$PWD/target/release/agentsadm bash tests/real-triton/apm/run.sh SRC_DIR
#
# SRC_DIR holds clones of TritonDataCenter/{sdc-agents-core, sdc-config-agent,
# sdc-vm-agent, sdc-net-agent, sdc-cn-agent} as SRC_DIR/<repo> or
# SRC_DIR/<owner>+<repo>/repo. Needs root (each side runs in a private mount
# namespace: its own /opt, and the stand-ins of standin.py over /usr and
# /var/lib), node and npm (apm's three modules come from the npm registry),
# python3, git, GNU tar. APM_WORK (default ${TMPDIR:-/tmp}/agentsadm-apm) is
# scratch, emptied at the start; AGENTSADM_ARGS is added to each agentsadm
# command (e.g. `--min-healthy 0s` to time it without its 10 s health gate).
# Exit 0 only when every step matches.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=${1:?usage: AGENTSADM=PATH bash run.sh SRC_DIR}
: "${AGENTSADM:?set AGENTSADM to the agentsadm binary to compare}"
WORK=${APM_WORK:-${TMPDIR:-/tmp}/agentsadm-apm}
read -r -a EXTRA <<< "${AGENTSADM_ARGS:-}"

[ "$(id -u)" = 0 ] || { echo "run.sh needs root (unshare -m, mounts)" >&2; exit 2; }
case "$WORK" in /?*) ;; *) echo "APM_WORK must be an absolute path other than /" >&2; exit 2 ;; esac
if [ -d "$WORK" ] && [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.apm-diff-root" ]; then
  echo "APM_WORK $WORK is not empty and was not made by this script: choose another" >&2
  exit 2
fi
mkdir -p "$WORK"
touch "$WORK/.apm-diff-root"
find "$WORK" -mindepth 1 -maxdepth 1 ! -name .apm-diff-root ! -name apm-src -exec rm -rf {} +

repo_dir() {
  local r
  for r in "$SRC/$1" "$SRC/TritonDataCenter+$1/repo"; do
    [ -e "$r" ] && { echo "$r"; return; }
  done
  echo "no clone of $1 under $SRC" >&2
  exit 2
}

# ---- apm itself: agents_core's bin/apm.js with its npm modules
if [ ! -f "$WORK/apm-src/node_modules/.ready" ]; then
  rm -rf "$WORK/apm-src"
  mkdir -p "$WORK/apm-src"
  git -C "$(repo_dir sdc-agents-core)" archive HEAD bin package.json | tar -x -C "$WORK/apm-src"
  # amqp (a git dependency) is the amqp agent's, not apm's
  python3 - "$WORK/apm-src/package.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["dependencies"].pop("amqp", None); p.pop("scripts", None)
json.dump(p, open(sys.argv[1], "w"))
PY
  (cd "$WORK/apm-src" && npm install --ignore-scripts --no-audit --no-fund > npm.log 2>&1)
  touch "$WORK/apm-src/node_modules/.ready"
fi

# ---- the packages: v1 is each repository's 11th newest commit, v2 its newest
# Top-level entries each Makefile's release target copies (node_modules and
# the bundled node left out: the hooks use neither).
declare -A REPO=([agents_core]=sdc-agents-core [config-agent]=sdc-config-agent
  [vm-agent]=sdc-vm-agent [net-agent]=sdc-net-agent [cn-agent]=sdc-cn-agent)
declare -A ENTRIES=(
  [agents_core]="bin lib bootstrap Makefile npm package.json"
  [config-agent]="bin cmd lib Makefile agent.js npm smf package.json"
  [vm-agent]="bin lib Makefile package.json runtests tests sapi_manifests smf npm"
  [net-agent]="bin lib Makefile sapi_manifests smf test npm package.json"
  [cn-agent]="Makefile bin lib npm sapi_manifests smf test tools package.json")
declare -A PKG
mkdir -p "$WORK/pkgs"
build() {  # build NAME V: $WORK/pkgs/<file>.tgz and its .manifest
  local name=$1 v=$2 dir commit stamp stage entries=() e file uuid
  dir=$(repo_dir "${REPO[$name]}")
  if [ "$v" = 1 ]; then commit=$(git -C "$dir" rev-list --max-count=1 --skip=10 HEAD); else commit=$(git -C "$dir" rev-parse HEAD); fi
  stamp="master-2025010${v}T000000Z-g${commit:0:7}"
  stage="$WORK/stage/$name-$v"
  mkdir -p "$stage/$name"
  for e in ${ENTRIES[$name]}; do
    git -C "$dir" cat-file -e "$commit:$e" 2> /dev/null && entries+=("$e")
  done
  git -C "$dir" archive "$commit" "${entries[@]}" | tar -x -C "$stage/$name"
  uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  echo "$uuid" > "$stage/$name/image_uuid"
  if [ "$name" = config-agent ]; then  # `make all` renders this one at build time
    sed 's#@@NODE@@#@@PREFIX@@/build/node/bin/node#' "$stage/$name/smf/manifests/config-agent.xml.in" \
      > "$stage/$name/smf/manifests/config-agent.xml"
  fi
  file="$name-$stamp.tgz"
  [ "$name" = config-agent ] && file="config-agent-pkg-$stamp.tar.gz"
  python3 - "$stage/$name/package.json" "$stamp" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["version"] += "-" + sys.argv[2]
json.dump(p, open(sys.argv[1], "w"), indent=2)
PY
  tar -czf "$WORK/pkgs/$file" -C "$stage" "$name"
  python3 - "$WORK/pkgs/$file" "$name" "$stage/$name/package.json" "$uuid" "$stamp" <<'PY'
import hashlib, json, os, sys
f, name, pj, uuid, stamp = sys.argv[1:]
data = open(f, "rb").read()
m = {"v": 2, "uuid": uuid, "owner": "00000000-0000-0000-0000-000000000000", "name": name,
     "version": json.load(open(pj))["version"], "state": "active", "disabled": False,
     "public": False, "type": "other", "os": "other",
     "files": [{"sha1": hashlib.sha1(data).hexdigest(), "size": len(data), "compression": "gzip"}],
     "tags": {"smartdc_service": "true", "buildstamp": stamp}}
base = f[: -len(".tar.gz")] if f.endswith(".tar.gz") else f[: -len(".tgz")]
json.dump(m, open(base + ".manifest", "w"), indent=2)
PY
  PKG[$name-$v]="$WORK/pkgs/$file"
}
for name in agents_core config-agent vm-agent net-agent cn-agent; do build "$name" 1; build "$name" 2; done
rm -rf "$WORK/stage"

# ---- two servers: a root, a stand-in SMF and the stand-in commands each
for side in apm agentsadm; do
  s="$WORK/$side"
  mkdir -p "$s/root/opt" "$s/state" "$s/usr/bin" "$s/usr/sbin" "$s/usr/lib/sdc" "$s/varlib"
  # what agents_core's bootstrap.sh makes before any apm install (agentsshar)
  (cd "$s/root" && mkdir -p opt/smartdc/agents/{bin,etc,db,lib/node_modules,smf})
  for c in sysinfo bootparams uuid json svcs uname; do
    printf '#!/bin/sh\nexec /usr/bin/python3 %s %s %s "$@"\n' "$HERE/standin.py" "$s/state" "$c" > "$s/usr/bin/$c"
  done
  for c in svccfg svcadm; do
    printf '#!/bin/sh\nexec /usr/bin/python3 %s %s %s "$@"\n' "$HERE/standin.py" "$s/state" "$c" > "$s/usr/sbin/$c"
  done
  chmod 755 "$s"/usr/bin/* "$s"/usr/sbin/*
  # A headnode before setup completes: the hooks keep their instance UUID
  # and skip SAPI (as agentsadm does with --no-sapi).
  cat > "$s/usr/lib/sdc/config.sh" <<'SH'
# stand-in for /lib/sdc/config.sh: no SAPI answers at 127.0.0.1:1
load_sdc_config() {
  CONFIG_sapi_domain=127.0.0.1:1 CONFIG_imgapi_domain=127.0.0.1:1
  CONFIG_datacenter_name=apmdiff CONFIG_dns_domain=test
}
if [ "${1:-}" = -json ]; then
  echo '{"sapi_domain":"127.0.0.1:1","imgapi_domain":"127.0.0.1:1","datacenter_name":"apmdiff","dns_domain":"test"}'
fi
SH
  echo '{"complete": false}' > "$s/varlib/setup.json"
done

# run SIDE OUT CMD...: CMD in SIDE's namespace; OUT.log its output, OUT.time "status ms"
run() {
  local side=$1 out=$2
  shift 2
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare -m --propagation private /bin/bash -c '
    s=$1 out=$2; shift 2
    mount -t overlay overlay -o "lowerdir=$s/usr:/usr" /usr
    mount -t overlay overlay -o "lowerdir=$s/varlib:/var/lib" /var/lib
    mount --bind "$s/root/opt" /opt
    cd /
    t0=$(date +%s%N)
    set +e
    "$@" > "$out.log" 2>&1
    rc=$?
    echo "$rc $(( ($(date +%s%N) - t0) / 1000000 ))" > "$out.time"' ns "$WORK/$side" "$out" "$@"
}

STEPS=("install agents_core 1" "install config-agent 1" "install vm-agent 1" "install net-agent 1"
  "install cn-agent 1" "install agents_core 2" "install config-agent 2" "install vm-agent 2"
  "install net-agent 2" "install cn-agent 2" "remove vm-agent" "remove net-agent" "remove cn-agent"
  "remove config-agent"
  # Four agents in one command each side (issue 35): apm installs them one
  # after the other; agentsadm runs the parallel-safe ones at once, their
  # health gates overlapping.
  "install config-agent+vm-agent+net-agent+cn-agent 1"
  "install config-agent+vm-agent+net-agent+cn-agent 2")
mkdir -p "$WORK/steps"
alike=0 n=0 tapm=0 tadm=0 removed=""
printf '%-4s %-26s %9s %11s %9s  %s\n' step what apm_s agentsadm_s own_calls result
for step in "${STEPS[@]}"; do
  n=$((n + 1))
  read -r verb name v <<< "$step"
  out="$WORK/steps/$n"
  [ "$verb" = remove ] && removed="$removed,$name"
  for side in apm agentsadm; do
    rm -f "$WORK/$side/state/calls.log"
    if [ "$verb" = install ]; then
      what=()
      IFS=+ read -r -a names <<< "$name"
      for one in "${names[@]}"; do what+=("${PKG[$one-$v]}"); done
      [ "$side" = apm ] && run apm "$out-apm" node "$WORK/apm-src/bin/apm.js" install "${what[@]}"
      [ "$side" = agentsadm ] && run agentsadm "$out-agentsadm" "$AGENTSADM" gz install --no-sapi --no-cnapi "${EXTRA[@]}" "${what[@]}"
    else
      [ "$side" = apm ] && run apm "$out-apm" node "$WORK/apm-src/bin/apm.js" uninstall "$name"
      [ "$side" = agentsadm ] && run agentsadm "$out-agentsadm" "$AGENTSADM" gz remove --no-sapi --no-cnapi "${EXTRA[@]}" "$name"
    fi
    python3 "$HERE/compare.py" snapshot "$WORK/$side/root" "$WORK/$side/state" "$out-$side.json"
  done
  read -r rca msa < "$out-apm.time"
  read -r rcb msb < "$out-agentsadm.time"
  tapm=$((tapm + msa)) tadm=$((tadm + msb))
  result=alike
  if [ "$rca" != 0 ] || [ "$rcb" != 0 ]; then
    result="exit apm $rca, agentsadm $rcb (see $out-*.log)"
  elif ! python3 "$HERE/compare.py" diff "$out-apm.json" "$out-agentsadm.json" "$removed" > "$out.diff"; then
    result="DIFFERENT ($out.diff)"
  else
    alike=$((alike + 1))
    result="alike"
    [ -s "$out.diff" ] && result="alike but for $(grep -c . "$out.diff") known differences"
  fi
  # the installer's own SMF and sysinfo calls (not the hooks'), apm/agentsadm
  own=$(python3 -c 'import json, sys; print("/".join(str(len(json.load(open(p))["calls"]["installer"])) for p in sys.argv[1:]))' "$out-apm.json" "$out-agentsadm.json")
  printf '%-4s %-26s %9.2f %11.2f %9s  %s\n' "$n" "$verb $name${v:+ v$v}" "$(bc <<< "scale=3; $msa/1000")" "$(bc <<< "scale=3; $msb/1000")" "$own" "$result"
  if [ -s "$out.diff" ]; then sed 's/^/       /' "$out.diff" | head -30; fi
done
printf 'total: apm %.2f s, agentsadm %.2f s; %d of %d steps alike\n' "$(bc <<< "scale=3; $tapm/1000")" "$(bc <<< "scale=3; $tadm/1000")" "$alike" "$n"
[ "$alike" = "$n" ]
