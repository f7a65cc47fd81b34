#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# prepare.sh SRC_DIR: the sources under $RT_ROOT/src, their npm modules, and a
# PostgreSQL cluster for moray. SRC_DIR holds local clones of the public
# repositories, each as SRC_DIR/<repo> or SRC_DIR/<owner>+<repo>/repo (what the
# `fetch` tool leaves). Done once per RT_ROOT (marker $RT_ROOT/src/.prepared).
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "$0")/env.sh"
SRC_DIR=${1:?usage: prepare.sh SRC_DIR}
mkdir -p "$RT_SRC" "$RT_LOGS" "$RT_RUN" "$MOCKCLOUD_ROOT/servers"
# PostgreSQL for moray: loopback, trust, owned by user postgres
if [ ! -d "$RT_ROOT/pg/data" ]; then
  mkdir -p "$RT_ROOT/pg"; chown postgres "$RT_ROOT/pg"
  runuser -u postgres -- "$(dirname "$(command -v initdb)")/initdb" -D "$RT_ROOT/pg/data" -A trust -U postgres > "$RT_LOGS/initdb.log"
fi

clone() {  # clone OWNER REPO [REV]: a working copy in $RT_SRC/REPO
  local from="$SRC_DIR/$2"
  [ -d "$from" ] || from="$SRC_DIR/$1+$2/repo"
  [ -d "$from" ] || { echo "prepare: no clone of $1/$2 in $SRC_DIR" >&2; exit 1; }
  [ -d "$RT_SRC/$2" ] || git clone -q "$from" "$RT_SRC/$2"
  if [ -n "${3:-}" ]; then git -C "$RT_SRC/$2" checkout -q "$3"; fi
}
S="$RT_LIB/node/standins"
# The real sdcadm (its own marker: a root prepared before it was added gets it too)
if [ ! -f "$RT_SRC/.prepared-sdcadm" ]; then
  clone TritonDataCenter sdcadm
  clone joyent schemas
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdcadm" sdcadm "$S"
  echo "prepare: npm install in sdcadm"
  (cd "$RT_SRC/sdcadm" && npm install --ignore-scripts --no-audit --no-fund > "$RT_LOGS/npm-sdcadm.log" 2>&1) ||
    { echo "prepare: npm install failed in sdcadm (see $RT_LOGS/npm-sdcadm.log)" >&2; exit 1; }
  # a real install has its build stamp (sdcadm's self-update reads it)
  echo "master-20260101T000000Z-g$(git -C "$RT_SRC/sdcadm" rev-parse --short=7 HEAD)" > "$RT_SRC/sdcadm/etc/buildstamp"
  touch "$RT_SRC/.prepared-sdcadm"
fi
if [ ! -f "$RT_SRC/.prepared" ]; then

  clone TritonDataCenter sdc-cnapi
  clone TritonDataCenter sdc-cn-agent
  clone TritonDataCenter moray
  clone TritonDataCenter sdc-ur-agent
  clone TritonDataCenter sdc-designation 8110b5e   # the commit cnapi pins
  clone TritonDataCenter sdc-wf-shared f9ef781     # the commit cnapi pins
  clone joyent node-crc 0.3.0-oldcrc               # the tag fast pins
  clone joyent schemas                             # cnapi's pinned commit is not public any more
  clone TritonDataCenter sdc-sapi 7723e43          # 2.1.3
  clone TritonDataCenter sdc-imgapi 15467c4        # 4.13.1

  python3 "$RT_LIB/pkg.py" "$RT_SRC/moray" moray "$S"
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-cnapi" cnapi "$S"
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-cn-agent" cn-agent "$S"
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-designation" designation "$S"
  mkdir -p "$RT_SRC/wf"; python3 "$RT_LIB/pkg.py" "$RT_SRC/wf" wf "$S"
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-sapi" sapi "$S"
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-imgapi" imgapi "$S"
  for r in moray sdc-designation schemas sdc-cnapi sdc-cn-agent wf sdc-sapi sdc-imgapi; do
    echo "prepare: npm install in $r"
    (cd "$RT_SRC/$r" && npm install --ignore-scripts --no-audit --no-fund > "$RT_LOGS/npm-$r.log" 2>&1) ||
      { echo "prepare: npm install failed in $r (see $RT_LOGS/npm-$r.log)" >&2; exit 1; }
  done
  # wf-shared's workflow modules require cnapi's dependencies: they live inside it
  W="$RT_SRC/sdc-cnapi/node_modules/wf-shared"
  rm -rf "$W"; mkdir -p "$W"; cp -r "$RT_SRC/sdc-wf-shared/lib" "$RT_SRC/sdc-wf-shared/package.json" "$W/"
  # The few source edits (fixed SmartOS paths, one Node >= 14 incompatibility):
  # each is listed, and checked, in edits.py.
  python3 "$RT_LIB/edits.py" "$RT_SRC"
  touch "$RT_SRC/.prepared" "$RT_SRC/.prepared-sapi-moray" "$RT_SRC/.prepared-wf-moray"
fi
# node-workflow's moray backend: a root prepared before it gets it here
if [ ! -f "$RT_SRC/.prepared-wf-moray" ]; then
  python3 "$RT_LIB/pkg.py" "$RT_SRC/wf" wf "$S"
  echo "prepare: npm install in wf (its moray backend)"
  (cd "$RT_SRC/wf" && npm install --ignore-scripts --no-audit --no-fund > "$RT_LOGS/npm-wf.log" 2>&1) ||
    { echo "prepare: npm install failed in wf (see $RT_LOGS/npm-wf.log)" >&2; exit 1; }
  touch "$RT_SRC/.prepared-wf-moray"
fi
# SAPI with its real moray client (full mode): a root prepared when SAPI had a
# stand-in for it gets the client here
if [ ! -f "$RT_SRC/.prepared-sapi-moray" ]; then
  git -C "$RT_SRC/sdc-sapi" checkout -q package.json
  python3 "$RT_LIB/pkg.py" "$RT_SRC/sdc-sapi" sapi "$S"
  echo "prepare: npm install in sdc-sapi (its moray client)"
  (cd "$RT_SRC/sdc-sapi" && npm install --ignore-scripts --no-audit --no-fund > "$RT_LOGS/npm-sdc-sapi.log" 2>&1) ||
    { echo "prepare: npm install failed in sdc-sapi (see $RT_LOGS/npm-sdc-sapi.log)" >&2; exit 1; }
  touch "$RT_SRC/.prepared-sapi-moray"
fi
