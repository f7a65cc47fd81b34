# shellcheck shell=bash
# Sourced by every harness script: where things live and which loopback ports.
# RT_ROOT (scratch, default ${TMPDIR:-/tmp}/agentsadm-rt) and RT_PORT (first of
# the ~40 consecutive ports used, default 27400) may be set by the caller.
RT_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${RT_ROOT:=${TMPDIR:-/tmp}/agentsadm-rt}"
: "${RT_PORT:=27400}"
export RT_HOME RT_ROOT RT_PORT
export RT_LIB="$RT_HOME/lib" RT_SRC="$RT_ROOT/src" RT_RUN="$RT_ROOT/run" RT_LOGS="$RT_ROOT/logs"
export RT_BIN="$RT_LIB/bin" RT_DC=rt1 RT_DNS=rt.test RT_ZONE=5e1f0000-0000-4000-8000-00000000c0a1
export MOCKCLOUD_ROOT="$RT_ROOT/mockcloud" RT_UR="$RT_ROOT/ur"
export PG_PORT=$RT_PORT MORAY_PORT=$((RT_PORT + 1)) WF_PORT=$((RT_PORT + 3))
export STUB_PORT=$((RT_PORT + 4)) CNAPI_PORT=$((RT_PORT + 5)) CNAPI_PROXY=$((RT_PORT + 6))
export CNAPI_METRICS=$((RT_PORT + 7)) SIM_PORT=$((RT_PORT + 10))
export IMGAPI_PORT=$SIM_PORT SAPI_PORT=$((SIM_PORT + 1)) UPDATES_PORT=$((SIM_PORT + 3))
export AMQP_PORT=$((RT_PORT + 20)) EPMD_PORT=$((RT_PORT + 21)) DIST_PORT=$((RT_PORT + 22))
export ASSETS_PORT=$((RT_PORT + 35))
# agentsadm (on the "headnode") talks to the real CNAPI through a logging proxy,
# and to the simulator's IMGAPI and SAPI.
export CNAPI_URL="http://127.0.0.1:$CNAPI_PROXY" SAPI_URL="http://127.0.0.1:$SAPI_PORT"
export IMGAPI_URL="http://127.0.0.1:$IMGAPI_PORT" UPDATES_URL="http://127.0.0.1:$UPDATES_PORT"
export XDG_STATE_HOME="$RT_ROOT/state"
# Names the Triton services resolve through binder on a headnode, and fixed ports.
export RT_HOSTS="cnapi.$RT_DC.$RT_DNS=127.0.0.1:$CNAPI_PORT,sapi.$RT_DC.$RT_DNS=127.0.0.1:$SAPI_PORT,imgapi.$RT_DC.$RT_DNS=127.0.0.1:$IMGAPI_PORT,napi.$RT_DC.$RT_DNS=127.0.0.1:$STUB_PORT,vmapi.$RT_DC.$RT_DNS=127.0.0.1:$STUB_PORT,assets.$RT_DC.$RT_DNS=127.0.0.1:$ASSETS_PORT"
export RT_PORTS="8881=$CNAPI_METRICS"
# shellcheck disable=SC2034 # used by stack.sh
RT_NODE=(node --require "$RT_LIB/node/preload.js")  # every Triton service runs as RT_NODE
