# shellcheck shell=bash
# Sourced by run.sh after checks2.sh: the real sdcadm beside agentsadm.
# shellcheck disable=SC2034 # read by run.sh
RT_CHECKS=("${RT_CHECKS[@]}" cn-setup-postinstall sdcadm)

# --- sdcadm: the real sdcadm 1.39 (its lib/cli, unedited; lib/sdcadm/in-ns.sh)
# on the datacenter agentsadm keeps: the real CNAPI, SAPI (full mode, on
# moray) and IMGAPI, the simulator's updates server, and real Ur to the mock
# servers' ur-agents (its `svcs -vx` health checks run there; S1 plays the
# headnode). After agentsadm has registered itself, gz-tools and two agents:
# check-health has no unhealthy row for agentsadm, gz-tools or sdcadm;
# `experimental avail` exits 0; `experimental update -n` of gz-tools and of
# agentsadm ends without a crash (sdcadm looks for services in the `sdc`
# application only, and agentsadm keeps those three in its own: sdcadm says
# it does not know them); `insts` lists each instance once ---
sdcadm_run() {  # sdcadm_run OUT NAME ARGS...: the real sdcadm; its output in OUT/NAME.out, its exit status
  local out=$1 name=$2; shift 2
  timeout 300 unshare -m --propagation private bash "$RT_LIB/sdcadm/in-ns.sh" "$S1" "$@" > "$out/$name.out" 2> "$out/$name.err"
}
newest() {  # newest NAME: the newest version of NAME on the updates server
  json "$UPDATES_URL/images?name=$1" 'sorted(d, key=lambda i: i["published_at"])[-1]["version"]'
}
check_sdcadm() {
  load_servers
  local rc u ur=() health avail upd=() insts v name
  # agentsadm's own records first: its registration (the bootstrap), gz-tools, two agents
  aa install cn-agent --image 2.15.0 -y -s "$S1" --task-timeout 3m > "$1/prep.out" 2>&1
  aa install vm-agent --image 1.0.0 -y -s "$S1" --task-timeout 3m >> "$1/prep.out" 2>&1
  aa install gz-tools -y -s "$S1" --task-timeout 3m >> "$1/prep.out" 2>&1
  # the servers whose ur-agent runs: sdcadm asks each through Ur
  for u in $(json "http://127.0.0.1:$CNAPI_PORT/servers" '" ".join(sorted(s["uuid"] for s in d))'); do
    [ -n "$(ur_pid "$u" 2> /dev/null)" ] && ur+=("$u")
  done
  local only=()  # sdcadm takes one -s per server
  for u in "${ur[@]}"; do only+=(-s "$u"); done
  sdcadm_run "$1" check-health check-health -j "${only[@]}"; rc=$?
  health=$(python3 - "$1/check-health.out" "$rc" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("unparsable (exit %s): %s" % (sys.argv[2], e)); sys.exit()
ours = [r for r in rows if r.get("service") in ("agentsadm", "gz-tools", "sdcadm")]
bad = ["%s@%s" % (r["service"], r.get("hostname")) for r in ours if r.get("healthy") is not True]
other = sum(1 for r in rows if r.get("healthy") is not True) - len(bad)
print("%d rows (%d of agentsadm/gz-tools/sdcadm), unhealthy: %s; other unhealthy rows %d"
      % (len(rows), len(ours), " ".join(bad) or "none", other))
PY
)
  sdcadm_run "$1" avail experimental avail; avail=$?
  for name in gz-tools agentsadm; do
    v=$(newest "$name")
    sdcadm_run "$1" "update-$name" experimental update -n "$name@$v"; rc=$?
    if grep -q -E 'TypeError|ReferenceError|AssertionError|Uncaught|throw er' "$1/update-$name.out" "$1/update-$name.err"; then
      upd+=("$name@$v: crash (exit $rc)")
    else
      upd+=("$name@$v: exit $rc ($(cat "$1/update-$name.out" "$1/update-$name.err" | grep -m1 -v '^\s*$' | cut -c1-90))")
    fi
  done
  sdcadm_run "$1" insts insts -j
  insts=$(python3 - "$1/insts.out" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("unparsable: %s" % e); sys.exit()
seen, twice = set(), set()
for r in rows:
    k = (r.get("service"), r.get("server"), r.get("instance"))
    (twice if k in seen else seen).add(k)
print("%d instances, listed twice: %s" % (len(rows), " ".join("%s/%s" % k[:2] for k in sorted(twice)) or "none"))
PY
)
  echo "servers through Ur ${#ur[@]}; check-health: $health; experimental avail exit $avail; update -n ${upd[*]}; insts: $insts"
  [[ $health == *"unhealthy: none;"* ]] && [[ $health != "0 rows"* ]] && [ "$avail" = 0 ] &&
    [[ "${upd[*]}" != *crash* ]] && [[ $insts == *"listed twice: none" ]] && [[ $insts != "0 instances"* ]]
}

# --- cn-setup-postinstall: a setup that fails in an agent's own postinstall.
# A new server set up as a Triton global zone in a directory (the stand-in's
# rooted mode: the images' lifecycle scripts run, unlike the mockcloud
# layout's), with SAPI's vm-agent image one whose postinstall exits 1. CNAPI's
# server-setup job fails at the agents step; the server's agent-setup.log
# names vm-agent and its postinstall; the failed install leaves nothing
# behind (no transaction journal, no vm-agent in the zone, no SAPI instance);
# with the good image back a second setup succeeds and installs it ---
check_cn_setup_postinstall() {
  load_servers
  local u svc good bad job job2 log g left inst img
  u=$(new_unsetup_server) || { echo "no new mock server"; return 1; }
  echo "S7=$u" >> "$RT_RUN/servers"
  stand_in "$u" rooted
  g="$RT_UR/$u/gz"
  aa sim publish --to "$IMGAPI_URL" --version 1.3.0 --stamp 20260304T000000Z \
    --hook 'postinstall=echo "vm-agent postinstall: cannot write its config" >&2; exit 1' vm-agent > "$1/publish.out" 2>&1
  bad=$(image_of vm-agent 1.3.0) || { echo "the image with a failing postinstall was not published ($1/publish.out)"; return 1; }
  svc=$(json "$SAPI_URL/services?name=vm-agent&type=agent" 'd[0]["uuid"]')
  good=$(json "$SAPI_URL/services/$svc" 'd["params"]["image_uuid"]')
  put "$SAPI_URL/services/$svc" "{\"action\":\"update\",\"params\":{\"image_uuid\":\"$bad\"}}"
  read -r -a job < <(setup_job "$u")
  cp "$RT_UR/var-$u/upper/log/agent-setup.log" "$1/agent-setup.log" 2> /dev/null
  # the installer's error line: the agent, then the step (hook:postinstall)
  log=$(grep -m1 -o 'error: vm-agent: hook:postinstall failed[^;]*' "$1/agent-setup.log" 2> /dev/null | head -c 200)
  left="journal $(find "$g/opt/smartdc/agents/.agentsadm/journal" -mindepth 1 2> /dev/null | wc -l)"
  left+=", vm-agent in the zone: $(cat "$g/opt/smartdc/agents/lib/node_modules/vm-agent/image_uuid" 2> /dev/null || echo none)"
  left+=", SAPI vm-agent instances $(instances vm-agent "$u")"
  put "$SAPI_URL/services/$svc" "{\"action\":\"update\",\"params\":{\"image_uuid\":\"$good\"}}"
  read -r -a job2 < <(setup_job "$u")
  img=$(cat "$g/opt/smartdc/agents/lib/node_modules/vm-agent/image_uuid" 2> /dev/null)
  inst=$(param vm-agent "$u" image_uuid)
  echo "job ${job[1]} at ${job[2]}; agent-setup.log: ${log:-no line naming vm-agent and postinstall}; after it: $left; second setup: job ${job2[1]}, vm-agent in the zone ${img:-none} (good $good), SAPI vm-agent image_uuid $inst"
  [ "${job[1]}" = failed ] && [[ ${job[2]} == cnapi.execute_agentsetup_script* ]] && [ -n "$log" ] &&
    [ "$left" = "journal 0, vm-agent in the zone: none, SAPI vm-agent instances 0" ] &&
    [ "${job2[1]}" = succeeded ] && [ "$img" = "$good" ] && [ "$inst" = "['$good']" ]
}
