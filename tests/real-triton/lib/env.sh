# shellcheck shell=bash
# Sourced by every harness script: where things live and which loopback ports.
# RT_ROOT (scratch, default ${TMPDIR:-/tmp}/agentsadm-rt), RT_PORT (first of
# the ~40 consecutive ports used, default 27400) and RT_SAPI (real: the real
# SAPI and IMGAPI, the default; sim: the simulator's) may be set by the caller.
RT_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${RT_ROOT:=${TMPDIR:-/tmp}/agentsadm-rt}"
: "${RT_PORT:=27400}"
: "${RT_SAPI:=real}"
export RT_HOME RT_ROOT RT_PORT RT_SAPI
export RT_LIB="$RT_HOME/lib" RT_SRC="$RT_ROOT/src" RT_RUN="$RT_ROOT/run" RT_LOGS="$RT_ROOT/logs"
export RT_BIN="$RT_LIB/bin" RT_DC=rt1 RT_DNS=rt.test RT_ZONE=5e1f0000-0000-4000-8000-00000000c0a1
export MOCKCLOUD_ROOT="$RT_ROOT/mockcloud" RT_UR="$RT_ROOT/ur"
export PG_PORT=$RT_PORT MORAY_PORT=$((RT_PORT + 1)) WF_PORT=$((RT_PORT + 3))
export STUB_PORT=$((RT_PORT + 4)) CNAPI_PORT=$((RT_PORT + 5)) CNAPI_PROXY=$((RT_PORT + 6))
export CNAPI_METRICS=$((RT_PORT + 7)) SIM_PORT=$((RT_PORT + 10))
# The simulator serves IMGAPI, SAPI, CNAPI and the updates server from SIM_PORT on.
export SIM_IMGAPI_PORT=$SIM_PORT SIM_SAPI_PORT=$((SIM_PORT + 1)) SIM_CNAPI_PORT=$((SIM_PORT + 2))
export UPDATES_PORT=$((SIM_PORT + 3))
export AMQP_PORT=$((RT_PORT + 20)) EPMD_PORT=$((RT_PORT + 21)) DIST_PORT=$((RT_PORT + 22))
export REAL_SAPI_PORT=$((RT_PORT + 30)) REAL_IMGAPI_PORT=$((RT_PORT + 31))
export ASSETS_PORT=$((RT_PORT + 35))
export SIM_IMGAPI_URL="http://127.0.0.1:$SIM_IMGAPI_PORT" SIM_SAPI_URL="http://127.0.0.1:$SIM_SAPI_PORT" SIM_CNAPI_URL="http://127.0.0.1:$SIM_CNAPI_PORT"
export REAL_IMGAPI_URL="http://127.0.0.1:$REAL_IMGAPI_PORT" REAL_SAPI_URL="http://127.0.0.1:$REAL_SAPI_PORT"
# The datacenter's IMGAPI and SAPI (what agentsadm, CNAPI, cn-agent and the
# installer on the mock servers use): the real ones, or the simulator's.
if [ "$RT_SAPI" = sim ]; then
  export IMGAPI_PORT=$SIM_IMGAPI_PORT SAPI_PORT=$SIM_SAPI_PORT
else
  export IMGAPI_PORT=$REAL_IMGAPI_PORT SAPI_PORT=$REAL_SAPI_PORT
fi
# agentsadm (on the "headnode") talks to the real CNAPI through a logging proxy.
export CNAPI_URL="http://127.0.0.1:$CNAPI_PROXY" SAPI_URL="http://127.0.0.1:$SAPI_PORT"
export IMGAPI_URL="http://127.0.0.1:$IMGAPI_PORT" UPDATES_URL="http://127.0.0.1:$UPDATES_PORT"
export XDG_STATE_HOME="$RT_ROOT/state"
# Names the Triton services resolve through binder on a headnode, and fixed ports.
export RT_HOSTS="cnapi.$RT_DC.$RT_DNS=127.0.0.1:$CNAPI_PORT,sapi.$RT_DC.$RT_DNS=127.0.0.1:$SAPI_PORT,imgapi.$RT_DC.$RT_DNS=127.0.0.1:$IMGAPI_PORT,napi.$RT_DC.$RT_DNS=127.0.0.1:$STUB_PORT,vmapi.$RT_DC.$RT_DNS=127.0.0.1:$STUB_PORT,assets.$RT_DC.$RT_DNS=127.0.0.1:$ASSETS_PORT,papi.$RT_DC.$RT_DNS=127.0.0.1:$STUB_PORT,workflow.$RT_DC.$RT_DNS=127.0.0.1:$WF_PORT"
export RT_PORTS="8881=$CNAPI_METRICS"
# shellcheck disable=SC2034 # used by stack.sh
RT_NODE=(node --require "$RT_LIB/node/preload.js")  # every Triton service runs as RT_NODE
