#!/usr/bin/env bash
# Issue 29: the real CNAPI's process id through gated rollouts, in
# config-agent's window (SAPI's FEATURE_USE_CNAGENT_COMMAND_EXECUTE on, the
# running CNAPI still in Ur mode) and in both steady modes, with CNAPI
# supervised (SUPERVISE=1: restarted 2 s after it exits, as SMF does).
#
# Runs against the reference loopback stack of
# /work/shared/tools/real-triton/cnapi (its README), started with real Ur and
# the agentsadm stub in ur-agent's namespace:
#   export FID_ROOT=... MIRROR=... WITH_UR=1 UR_NS=1 AGENTSADM=<agentsadm binary>
#   bash $FID_TOOLS/setup.sh && bash $FID_TOOLS/start.sh
#   FID_TOOLS=/work/shared/tools/real-triton/cnapi bash tests/real-triton/cnapi-window.sh
# Prints one line per case: the mode, what SAPI said, the run's exit status,
# CNAPI's pid before and after, and how many times it exited meanwhile.
set -uo pipefail
: "${FID_TOOLS:?set FID_TOOLS to the reference cnapi harness folder}"
source "$FID_TOOLS/env.sh"
export XDG_STATE_HOME="$FID_ROOT/state" UPDATES_URL="http://127.0.0.1:$((SIMA_PORT+3))"
SAPI="http://127.0.0.1:$((SIMA_PORT+1))"
OUT="$FID_ROOT/issue29"; mkdir -p "$OUT"
S1=$(curl -s "http://127.0.0.1:$CNAPI_PORT/servers" | python3 -c 'import json,sys; print(sorted(s["hostname"] for s in json.load(sys.stdin))[0])')
U1=$(curl -s "http://127.0.0.1:$CNAPI_PORT/servers?hostname=$S1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
CNAPI_SVC=$(curl -s "$SAPI/services?name=cnapi" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')

flag() {  # flag on|off: SAPI's cnapi service metadata (CNAPI itself is not told)
  local body
  if [ "$1" = on ]; then body='{"action":"update","metadata":{"FEATURE_USE_CNAGENT_COMMAND_EXECUTE":true}}'
  else body='{"action":"delete","metadata":{"FEATURE_USE_CNAGENT_COMMAND_EXECUTE":null}}'; fi
  curl -sf -X PUT -H 'Content-Type: application/json' -d "$body" "$SAPI/services/$CNAPI_SVC" > /dev/null
}
cnapi_pid() { pgrep -P "$(cat "$RUN/cnapi-supervisor.pid")" -f 'bin/cnapi.js' | head -1; }
exits() { local n; n=$(grep -c '^cnapi exited' "$LOGS/cnapi-supervisor.log" 2>/dev/null); echo "${n:-0}"; }
executes() {  # executes FROM-LINE: CommandExecutes in the agentsadm->CNAPI proxy log since then
  tail -n +"$(( $1 + 1 ))" "$LOGS/proxy-real-cnapi.jsonl" | python3 -c '
import json, sys
n = t = 0
for line in sys.stdin:
    try: r = json.loads(line)
    except ValueError: continue
    if r.get("method") != "POST" or not r.get("url", "").endswith("/execute"): continue
    req = r.get("req")
    if isinstance(req, str):
        try: req = json.loads(req)
        except ValueError: req = None
    n += 1; t += isinstance(req, dict) and "timeout" in req
print(f"executes {n}, with timeout {t}")'
}
case_run() {  # case_run NAME CNAPI_MODE SAPI_FLAG AGENTSADM-ARGS...
  local name=$1 mode=$2 sapi=$3; shift 3
  SUPERVISE=1 bash "$FID_TOOLS/restart-cnapi.sh" "$mode" > /dev/null
  flag "$sapi"; sleep 3
  local pid0 ex0 rc pid1 ex1 from
  pid0=$(cnapi_pid); ex0=$(exits); from=$(wc -l < "$LOGS/proxy-real-cnapi.jsonl")
  real "$@" -y -s "$S1" --task-timeout 3m > "$OUT/$name.out" 2>&1; rc=$?
  sleep 3; pid1=$(cnapi_pid); ex1=$(exits)
  echo "$name: CNAPI $mode, SAPI flag $sapi: agentsadm exit $rc; CNAPI pid $pid0 -> $pid1; exits $((ex1 - ex0)); $(executes "$from")"
}

# The server as a SunOS CN (agentsadm runs the health gate through execute),
# with a cn-agent new enough for CNAPI's cn-agent path.
python3 -c 'import json,sys; p=sys.argv[1]; s=json.load(open(p)); s["System Type"]="SunOS"; json.dump(s,open(p,"w"),indent=2)' "$MOCKCLOUD_ROOT/servers/$U1/sysinfo.json"
"$AGENTSADM" sim publish --to "http://127.0.0.1:$SIMA_PORT" --version 2.15.0 --stamp 20260301T000000Z cn-agent > /dev/null
"$AGENTSADM" sim publish --to "http://127.0.0.1:$SIMA_PORT" --version 1.1.0 --stamp 20260301T000000Z vm-agent > /dev/null
# The agentsadm "agentsadm first" bootstraps is the harness's stub (its gz
# health answers healthy, other gz commands go to the real installer).
STUB=$(bash "$FID_TOOLS/ur/stub-image.sh" 9.0.0 2> /dev/null)
AA_SVC=$(curl -s "$SAPI/services?name=agentsadm&type=agent" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])')
curl -sf -X PUT -H 'Content-Type: application/json' -d "{\"action\":\"update\",\"params\":{\"image_uuid\":\"$STUB\"}}" "$SAPI/services/$AA_SVC" > /dev/null
bash "$FID_TOOLS/ur/ur-agent.sh" stop "$U1" > /dev/null 2>&1; STUB_RESET=1 UR_NS=1 bash "$FID_TOOLS/ur/ur-agent.sh" start "$U1" > /dev/null
sleep 5
SUPERVISE=1 bash "$FID_TOOLS/restart-cnapi.sh" ur > /dev/null; flag off
real install cn-agent --image 2.15.0 -y -s "$S1" --task-timeout 3m > "$OUT/prep.out" 2>&1 || true

[ "${CASES:-1}" = 1 ] && {
# A stack used before has vm-agent already: take it off first, so that the
# window's install is a real, gated step on every run (not "already
# installed").
real remove vm-agent -y -s "$S1" --task-timeout 3m > "$OUT/unprep.out" 2>&1 || true
case_run window   ur       on  install vm-agent --image 1.0.0
case_run steady-ur ur      off update vm-agent --image 1.1.0
case_run steady-cn cn-agent on update vm-agent --image 1.0.0
}

# A server whose ur-agent is stopped: an execute-carried install gives up
# within the probe's bound (2 minutes), not the 30-minute --task-timeout.
if [ "${UR_DOWN:-1}" = 1 ]; then
  bash "$FID_TOOLS/ur/ur-agent.sh" stop "$U1" > /dev/null 2>&1
  SUPERVISE=1 bash "$FID_TOOLS/restart-cnapi.sh" ur > /dev/null; flag off; sleep 3
  pid0=$(cnapi_pid); t0=$(date +%s)
  real install gz-tools -y -s "$S1" --task-timeout 30m > "$OUT/ur-down.out" 2>&1; rc=$?
  echo "ur-down: agentsadm exit $rc after $(( $(date +%s) - t0 )) s; CNAPI pid $pid0 -> $(cnapi_pid); says: $(grep -o "check 'svcs ur' on that server" "$OUT/ur-down.out" | head -1)"
  UR_NS=1 bash "$FID_TOOLS/ur/ur-agent.sh" start "$U1" > /dev/null
fi
