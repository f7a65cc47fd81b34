# shellcheck shell=bash
# Sourced by run.sh after checks.sh: the checks that compare the simulator with
# the real services (twin, api-refusals), the reboot in the middle of a CN
# setup, and the intent marks through bare re-adoptions (issue 30).
# shellcheck disable=SC2034 # read by run.sh
RT_CHECKS=(api-refusals twin "${RT_CHECKS[@]}" intent-marks bare-adoption cn-setup-reboot)

# --- api-refusals: the same bad requests to the simulator and to the real
# services answer alike (status and restify error code) ---

# refusal API METHOD PATH [BODY]: "status code" of one request to API's side ($BASE)
refusal() {
  local args=(-s -o "$RT_RUN/refusal.body" -w '%{http_code}' -X "$2")
  [ -z "${4:-}" ] || args+=(-H 'Content-Type: application/json' -d "$4")
  local status
  status=$(curl "${args[@]}" "$1$3")
  echo "$status $(python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("code", "-"))
except Exception: print("-")' "$RT_RUN/refusal.body")"
}
check_api_refusals() {
  load_servers
  local none=00000000-0000-4000-8000-0000000000ff sim_srv img alike=0 total=0 diffs=()
  sim_srv=$(json "$SIM_CNAPI_URL/servers" 'sorted(s["uuid"] for s in d)[0]')
  img=$(json "$SIM_IMGAPI_URL/images?name=vm-agent" 'd[0]["uuid"]')
  # name|API(sapi,imgapi,cnapi)|method|path (SRV: a server of that side)|body
  local cases=(
    "cnapi-setup-hostname-type|cnapi|PUT|/servers/SRV/setup|{\"hostname\":5}"
    "cnapi-setup-spares-type|cnapi|PUT|/servers/SRV/setup|{\"disk_spares\":\"x\"}"
    "cnapi-setup-cache-type|cnapi|PUT|/servers/SRV/setup|{\"disk_cache\":\"maybe\"}"
    "cnapi-setup-unknown-param|cnapi|PUT|/servers/SRV/setup|{\"bogus\":1}"
    "cnapi-setup-layout|cnapi|PUT|/servers/SRV/setup|{\"disk_layout\":\"raid0\"}"
    "cnapi-reset-origin-type|cnapi|PUT|/servers/SRV/factory-reset|{\"origin\":5}"
    "cnapi-setup-method|cnapi|DELETE|/servers/SRV/setup|"
    "cnapi-unknown-server|cnapi|GET|/servers/$none|"
    "sapi-method|sapi|DELETE|/applications|"
    "sapi-unknown-instance|sapi|GET|/instances/$none|"
    "sapi-instance-no-service|sapi|POST|/instances|{}"
    "sapi-unknown-service-update|sapi|PUT|/services/$none|{\"action\":\"update\",\"params\":{}}"
    "sapi-mode-missing|sapi|POST|/mode|"
    "sapi-mode-proto|sapi|POST|/mode?mode=proto|"
    "imgapi-method|imgapi|PATCH|/images|"
    "imgapi-unknown-image|imgapi|GET|/images/$none|"
    "imgapi-bad-action|imgapi|POST|/images/$img?action=bogus|"
  )
  local c name api method path body sim real
  for c in "${cases[@]}"; do
    IFS='|' read -r name api method path body <<< "$c"
    case $api in
      cnapi) sim=$(refusal "$SIM_CNAPI_URL" "$method" "${path/SRV/$sim_srv}" "$body")
        real=$(refusal "http://127.0.0.1:$CNAPI_PORT" "$method" "${path/SRV/$S2}" "$body") ;;
      sapi) sim=$(refusal "$SIM_SAPI_URL" "$method" "$path" "$body"); real=$(refusal "$REAL_SAPI_URL" "$method" "$path" "$body") ;;
      imgapi) sim=$(refusal "$SIM_IMGAPI_URL" "$method" "$path" "$body"); real=$(refusal "$REAL_IMGAPI_URL" "$method" "$path" "$body") ;;
    esac
    echo "$name: simulator $sim, real $real" >> "$1/cases"
    total=$((total + 1))
    if [ "$sim" = "$real" ]; then alike=$((alike + 1)); else diffs+=("$name (sim $sim, real $real)"); fi
  done
  echo "$alike of $total alike${diffs[*]:+; differ: ${diffs[*]}}"
  [ "$alike" = "$total" ]
}

# --- twin: the same agentsadm commands through the simulator's SAPI/IMGAPI
# and through the real ones, each on its own new mock server (real CNAPI and
# cn-agent on both sides): exit status and that server's SAPI records alike ---

# new_server: a fresh mock server, set up, served by cn-agent and known to CNAPI; prints its UUID
new_server() {
  local before u d i
  before=$(cd "$MOCKCLOUD_ROOT/servers" && echo *)
  (cd "$RT_SRC/sdc-cn-agent" && "${RT_NODE[@]}" lib/backends/dummy/tools/create-server.js >> "$RT_LOGS/create-server.log" 2>&1)
  u=
  for d in "$MOCKCLOUD_ROOT"/servers/*; do [[ " $before " == *" ${d##*/} "* ]] || u=${d##*/}; done
  [ -n "$u" ] || return 1
  cn_agent_stop; cn_agent_start
  for ((i = 0; i < 60; i++)); do
    [ "$(json "http://127.0.0.1:$CNAPI_PORT/servers/$u" 'd["setup"]' 2> /dev/null)" = True ] && break
    sleep 1
  done
  echo "$u"
}
# twin_records T: server T's agent instances in this side's SAPI ($SAPI_URL),
# one line each: service, then params with T as "T" and mark times masked
twin_records() {
  python3 - "$SAPI_URL" "$1" <<'PY'
import json, sys, urllib.request
sapi, t = sys.argv[1], sys.argv[2]
get = lambda p: json.load(urllib.request.urlopen(sapi + p))
out = []
for s in get("/services?type=agent"):
    for i in get("/instances?service_uuid=" + s["uuid"]):
        p = i.get("params") or {}
        if p.get("server_uuid") != t:
            continue
        q = {}
        for k, v in p.items():
            if k == "server_uuid":
                v = "T"
            elif isinstance(v, dict):
                v = {a: ("<time>" if a in ("at", "since", "time") else b) for a, b in v.items()}
            q[k] = v
        out.append(s["name"] + " " + json.dumps(q, sort_keys=True))
print("\n".join(sorted(out)))
PY
}
tw() {  # tw STEP ARGS...: one twin command on this side; its exit status and T's SAPI records after it
  local step=$1; shift
  aa "$@" > "$TWIN_OUT/$TWIN_SIDE.$step.out" 2>&1
  echo "$step $?" >> "$TWIN_OUT/$TWIN_SIDE.rc"
  twin_records "$T" > "$TWIN_OUT/$TWIN_SIDE.$step.sapi"
}
twin_commands() {  # the twin's commands, on server $T of this side
  tw 01 install cn-agent --image 2.15.0 -y -s "$T" --task-timeout 3m
  tw 02 install vm-agent --image 1.0.0 -y -s "$T" --task-timeout 3m
  tw 03 update vm-agent --image 1.1.0 -y -s "$T" --task-timeout 3m
  tw 04 disable vm-agent -y -s "$T" --task-timeout 3m
  tw 05 update vm-agent --image 1.0.0 -y -s "$T" --task-timeout 3m
  tw 06 enable vm-agent -y -s "$T" --task-timeout 3m
  tw 07 hold vm-agent -s "$T" --reason twin "${HOLD_Y[@]}"
  tw 08 update vm-agent --image 1.1.0 -y -s "$T" --task-timeout 3m
  tw 09 release vm-agent -s "$T" "${HOLD_Y[@]}"
  tw 10 update vm-agent --image 1.1.0 -y -s "$T" --task-timeout 3m
  tw 11 check -s "$T"
  tw 12 install vm-agent --image 9.9.9 -y -s "$T" --task-timeout 3m
  tw 13 plan update vm-agent --image 1.0.0 -s "$T"
  tw 14 remove vm-agent -y -s "$T" --task-timeout 3m
  tw 15 install vm-agent --image 1.0.0 -y -s "$T" --task-timeout 3m
  tw 16 list -s "$T"
  tw 17 update --all --concurrency 2 -y -s "$T" --task-timeout 3m
  tw 18 history
}
check_twin() {
  [ "$RT_SAPI" = real ] || { echo "needs RT_SAPI=real"; return 1; }
  local t1 t2 side n same=0 diffs=()
  t1=$(new_server) && t2=$(new_server) || { echo "no new mock servers"; return 1; }
  echo "TWIN_SIM=$t1" >> "$RT_RUN/servers"; echo "TWIN_REAL=$t2" >> "$RT_RUN/servers"
  for side in sim real; do
    (
      if [ "$side" = sim ]; then
        export SAPI_URL=$SIM_SAPI_URL IMGAPI_URL=$SIM_IMGAPI_URL T=$t1
      else
        export SAPI_URL=$REAL_SAPI_URL IMGAPI_URL=$REAL_IMGAPI_URL T=$t2
      fi
      export XDG_STATE_HOME="$RT_ROOT/state-twin-$side" TWIN_OUT=$1 TWIN_SIDE=$side
      : > "$1/$side.rc"
      twin_commands
    )
  done
  n=$(grep -c . "$1/sim.rc")
  local step
  for step in $(cut -d' ' -f1 "$1/sim.rc"); do
    if [ "$(grep "^$step " "$1/sim.rc")" = "$(grep "^$step " "$1/real.rc")" ] &&
      cmp -s "$1/sim.$step.sapi" "$1/real.$step.sapi"; then
      same=$((same + 1))
    else
      diffs+=("$step (exit $(grep "^$step " "$1/sim.rc" | cut -d' ' -f2)/$(grep "^$step " "$1/real.rc" | cut -d' ' -f2)$(cmp -s "$1/sim.$step.sapi" "$1/real.$step.sapi" || echo ', records differ'))")
    fi
  done
  echo "$same of $n agentsadm commands alike (exit status and the server's SAPI records; exits: $(cut -d' ' -f2 "$1/real.rc" | paste -sd' '))${diffs[*]:+; differ: ${diffs[*]}}"
  [ "$same" = "$n" ] && [ "$n" -ge 18 ]
}

# --- intent-marks (issue 30): on S1 (the Ur path), vm-agent's postinstall
# re-adopts its instance bare before each install (the stand-in's readopt mode:
# real SAPI keeps only {uuid, service_uuid}); after update, revert, a rerun,
# check --fix and --ignore-holds the instance still says server_uuid,
# image_uuid (the one server.agents names), the disabled mark and the hold ---

# marks_after NAME RC: one line on S1's vm-agent instance, "ok" when all kept
marks_after() {
  local line
  line=$(python3 - "$SAPI_URL" "http://127.0.0.1:$CNAPI_PORT" "$S1" "$1" "$2" <<'PY'
import json, sys, urllib.request
sapi, cnapi, s1, name, rc = sys.argv[1:6]
get = lambda u: json.load(urllib.request.urlopen(u))
svc = get(sapi + "/services?name=vm-agent&type=agent")[0]
agents = {a["name"]: a for a in get(cnapi + "/servers/" + s1).get("agents") or []}
a = agents.get("vm-agent") or {}
inst = [i for i in get(sapi + "/instances?service_uuid=" + svc["uuid"])
        if i["uuid"] == a.get("uuid") or (i.get("params") or {}).get("server_uuid") == s1]
bad = []
if rc != "0":
    bad.append("exit " + rc)
if len(inst) != 1:
    bad.append("%d instances" % len(inst))
else:
    p = inst[0].get("params") or {}
    if p.get("server_uuid") != s1:
        bad.append("server_uuid %s" % p.get("server_uuid"))
    if not a.get("image_uuid") or p.get("image_uuid") != a.get("image_uuid"):
        bad.append("image_uuid %s (server.agents %s)" % (p.get("image_uuid"), a.get("image_uuid")))
    if not p.get("agentsadm_disabled"):
        bad.append("disabled mark lost")
    if not p.get("agentsadm_hold"):
        bad.append("hold lost")
print("%s: %s" % (name, "; ".join(bad) if bad else "ok"))
PY
)
  echo "$line" >> "$MARKS_OUT"
}
check_intent_marks() {
  load_servers
  export MARKS_OUT="$1/marks"; : > "$MARKS_OUT"
  local run n0
  # the starting point: vm-agent 1.0.0 on S1, whatever earlier checks left there
  aa install vm-agent --image 1.0.0 -y -s "$S1" --task-timeout 3m > "$1/prep.out" 2>&1
  aa update vm-agent --image 1.0.0 -y -s "$S1" --task-timeout 3m >> "$1/prep.out" 2>&1
  aa disable vm-agent -y -s "$S1" --task-timeout 3m > "$1/disable.out" 2>&1
  aa hold vm-agent -s "$S1" --reason intent-marks "${HOLD_Y[@]}" > "$1/hold.out" 2>&1
  n0=$(grep -c 'adopted bare' "$RT_UR/$S1/readopts.log" 2> /dev/null)
  stand_in "$S1" readopt
  aa update vm-agent --image 1.1.0 -y --ignore-holds -s "$S1" --task-timeout 3m > "$1/update.out" 2>&1
  marks_after update $?
  run=$(aa --json history | python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["runs"] if isinstance(d,dict) else d; print(r[0]["id"] if "id" in r[0] else r[0]["run_id"])')
  aa revert "$run" -y --ignore-holds --task-timeout 3m > "$1/revert.out" 2>&1
  marks_after revert $?
  aa update vm-agent --image 1.1.0 -y --ignore-holds -s "$S1" --task-timeout 3m > "$1/update2.out" 2>&1
  marks_after update-again $?
  aa update vm-agent --image 1.1.0 -y --ignore-holds -s "$S1" --task-timeout 3m > "$1/rerun.out" 2>&1
  marks_after rerun $?
  aa check --fix -y -s "$S1" > "$1/check-fix.out" 2>&1
  marks_after check-fix $?
  stand_in "$S1" real
  aa release vm-agent -s "$S1" "${HOLD_Y[@]}" > "$1/release.out" 2>&1
  aa enable vm-agent -y -s "$S1" --task-timeout 3m > "$1/enable.out" 2>&1
  local re=$(($(grep -c 'adopted bare' "$RT_UR/$S1/readopts.log" 2> /dev/null) - ${n0:-0}))
  echo "bare re-adoptions $re; $(paste -sd, "$MARKS_OUT" | sed 's/,/, /g')"
  [ "$re" -ge 3 ] && ! grep -qv ': ok$' "$MARKS_OUT"
}

# --- bare-adoption: a postinstall's bare adoption that no agentsadm run
# follows (an install by another tool: sdcadm, cn-agent's own task) leaves S1's
# vm-agent instance without server_uuid and image_uuid, which server.agents
# still knows, and without the disabled mark and the hold agentsadm set
# (their second copy is on the service): `check` reports it and `check --fix`
# writes it back whole ---
check_bare_adoption() {
  load_servers
  local rc1 rc2 after hold off
  aa disable vm-agent -y -s "$S1" --reason bare-adoption --task-timeout 3m > "$1/disable.out" 2>&1
  aa hold vm-agent -s "$S1" --reason bare-adoption "${HOLD_Y[@]}" > "$1/hold.out" 2>&1
  python3 "$RT_LIB/ur/readopt.py" "$SAPI_URL" "http://127.0.0.1:$CNAPI_PORT" "$S1" vm-agent > "$1/readopt.out" 2>&1
  aa check -s "$S1" > "$1/check.out" 2>&1; rc1=$?
  aa check --fix -y -s "$S1" > "$1/check-fix.out" 2>&1; rc2=$?
  after=$(param vm-agent "$S1" image_uuid)
  hold=$(param vm-agent "$S1" agentsadm_hold | grep -c "'reason': 'bare-adoption'")
  off=$(param vm-agent "$S1" agentsadm_disabled | grep -c "'reason': 'bare-adoption'")
  aa release vm-agent -s "$S1" "${HOLD_Y[@]}" > "$1/release.out" 2>&1
  aa enable vm-agent -y -s "$S1" --task-timeout 3m > "$1/enable.out" 2>&1
  echo "$(cat "$1/readopt.out"); check exit $rc1 ($(grep -m1 -oE 'drift|Drift|instance-params-erased [^:]*' "$1/check.out")); check --fix exit $rc2; instance image_uuid after it: $after (server.agents: $(agents "$S1" | tr ' ' '\n' | grep '^vm-agent@')); hold kept $hold, disabled mark kept $off"
  [ "$rc1" != 0 ] && [ "$rc2" = 0 ] && [ "$after" != "[]" ] && [ "$after" != "[None]" ] && [ "$hold" = 1 ] && [ "$off" = 1 ]
}

# --- cn-setup-reboot: the server reboots in the middle of CNAPI's server-setup
# job (the stand-in's reboot-mid-setup mode: the installer and ur-agent die
# at the installer's after-adopt checkpoint, the first install's SAPI record
# written and not committed). The real job does not fail: CNAPI waits for
# Ur's answer with setting_up true. The operator cancels the job; a second
# setup rolls back the interrupted install and sets the server up right,
# with one SAPI instance per agent (not the interrupted one's and another) ---
check_cn_setup_reboot() {
  load_servers
  local u job1 i st su job2 right cancel rolled recorded at
  u=$(new_unsetup_server) || { echo "no new mock server"; return 1; }
  echo "S6=$u" >> "$RT_RUN/servers"
  stand_in "$u" reboot-mid-setup
  curl -sf -X PUT -H 'Content-Type: application/json' -d '{}' "http://127.0.0.1:$CNAPI_PORT/servers/$u/setup" > /dev/null ||
    { echo "ServerSetup refused"; return 1; }
  for ((i = 0; i < 300; i++)); do
    grep -q . "$RT_UR/$u/boots.log" 2> /dev/null && break
    sleep 1
  done
  sleep 45  # Ur's answer never comes: the job keeps waiting
  # what the interrupted install had already recorded in SAPI for this server
  # (the reboot came after its adoption): each such component, with its count
  recorded=$(for a in $(default_set); do n=$(instances "$a" "$u"); [ "${n:-0}" = 0 ] || echo "$a:$n"; done | paste -sd' ')
  read -r -a job1 < <(job_of server-setup "$u")
  su=$(json "http://127.0.0.1:$CNAPI_PORT/servers/$u" '(d["setup"], d.get("setting_up"))')
  cancel=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$WF_PORT/jobs/${job1[0]}/cancel")
  sleep 3
  st=$(job_of server-setup "$u" | cut -d' ' -f2)
  read -r -a job2 < <(setup_job "$u")
  right=$(set_up_right "$u")
  cp "$RT_UR/var-$u/upper/log/agent-setup.log" "$1/agent-setup.log" 2> /dev/null
  rolled=$(grep -c 'interrupted' "$1/agent-setup.log" 2> /dev/null)
  at=$(grep -c 'reboot mid-setup: .*at after-adopt: 1' "$RT_UR/$u/calls.log" 2> /dev/null)
  echo "reboots $(ur_boots "$u"); reboot at the installer's after-adopt checkpoint: ${at:-0}; SAPI records of the interrupted install: ${recorded:-none}; first job ${job1[1]} 45 s after the reboot, CNAPI (setup, setting_up) $su; cancel $cancel -> $st; second setup: job ${job2[1]} (${job2[2]}), $right; agent-setup.log lines naming an interrupted install: ${rolled:-0}"
  [ "${at:-0}" = 1 ] && [ -n "$recorded" ] && [ "${job1[1]}" = running ] && [ "$su" = "(False, True)" ] &&
    [ "${job2[1]}" = succeeded ] && [ "$right" = ok ] && [ "${rolled:-0}" -ge 1 ]
}
