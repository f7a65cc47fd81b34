# shellcheck shell=bash
# Sourced by run.sh after stack.sh: the checks. Each check_<name> OUT prints one
# line of detail and returns 0 when the real services behaved as agentsadm
# expects; OUT is a folder for what agentsadm printed. Fixtures: three mock
# servers S1 (made a SunOS CN: its steps go through Ur), S2 and S3 (mockcloud
# "Virtual": cn-agent tasks only); S2 never gets a cn-agent.
# shellcheck disable=SC2034 # read by run.sh
RT_CHECKS=(registrations bootstrap execute-ur execute-window execute-cn-agent path exit-113
  restart-install restart-remove uninstall-floor ur-down disable-enable hold history-revert
  factory-reset server-delete cn-setup cn-reset-setup cn-setup-failure)

aa() { "$AGENTSADM" "$@"; }
# hold and release take -y where this build has it (a script may then need it)
HOLD_Y=()
if aa hold --help 2> /dev/null | grep -q -- '--yes'; then HOLD_Y=(-y); fi
# sysinfo_set UUID KEY VALUE: one key of a mock server's sysinfo.json, written
# whole (a new file renamed over it): cn-agent and ur-agent read it any time
sysinfo_set() {
  python3 -c 'import json,os,sys; p,k,v=sys.argv[1:4]; s=json.load(open(p)); s[k]=v; json.dump(s,open(p+".set","w"),indent=2); os.replace(p+".set",p)' \
    "$MOCKCLOUD_ROOT/servers/$1/sysinfo.json" "$2" "$3"
}
get() { curl -sf "$1"; }
# json URL EXPR: evaluates the Python expression EXPR over the JSON document `d`
json() { get "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"; }
put() { curl -sf -X PUT -H 'Content-Type: application/json' -d "$2" "$1" > /dev/null; }
# agents UUID: "name@image" of each server.agents entry, sorted, one line
agents() {
  json "http://127.0.0.1:$CNAPI_PORT/servers/$1" \
    '" ".join(sorted("%s@%s" % (a["name"], a.get("image_uuid")) for a in d.get("agents") or []))'
}
image_of() { json "$IMGAPI_URL/images?name=$1" "[i['uuid'] for i in d if i['version'].startswith('$2')][0]"; }  # image_of NAME VERSION-PREFIX
# instances NAME UUID: how many SAPI instances of agent NAME name server UUID
instances() {
  local svc
  svc=$(json "$SAPI_URL/services?name=$1&type=agent" 'd[0]["uuid"]')
  json "$SAPI_URL/instances?service_uuid=$svc" "sum(1 for i in d if (i.get(\"params\") or {}).get(\"server_uuid\") == \"$2\")"
}
param() {  # param NAME UUID KEY: the server's NAME instance's params[KEY]
  local svc
  svc=$(json "$SAPI_URL/services?name=$1&type=agent" 'd[0]["uuid"]')
  json "$SAPI_URL/instances?service_uuid=$svc" "[(i.get(\"params\") or {}).get(\"$3\") for i in d if (i.get(\"params\") or {}).get(\"server_uuid\") == \"$2\"]"
}
flag() {  # flag on|off: SAPI's cnapi service FEATURE_USE_CNAGENT_COMMAND_EXECUTE (CNAPI is not told)
  local svc
  svc=$(json "$SAPI_URL/services?name=cnapi" 'd[0]["uuid"]')
  if [ "$1" = on ]; then put "$SAPI_URL/services/$svc" '{"action":"update","metadata":{"FEATURE_USE_CNAGENT_COMMAND_EXECUTE":true}}'
  else put "$SAPI_URL/services/$svc" '{"action":"delete","metadata":{"FEATURE_USE_CNAGENT_COMMAND_EXECUTE":null}}'; fi
}
calls_mark() { wc -l < "$RT_LOGS/cnapi-calls.jsonl"; }
# executes FROM: CommandExecutes agentsadm sent CNAPI since line FROM, and how many carried `timeout`
executes() {
  tail -n +"$(($1 + 1))" "$RT_LOGS/cnapi-calls.jsonl" | python3 -c '
import json, sys
n = t = 0
for line in sys.stdin:
    e = json.loads(line)
    if e["method"] == "POST" and e["url"].split("?")[0].endswith("/execute"):
        n += 1
        t += isinstance(e.get("body"), dict) and "timeout" in e["body"]
print(n, t)'
}
stand_in() { echo "$2" > "$RT_UR/$1/mode"; }  # stand_in UUID MODE (see ur/gz-stand-in.sh)
# publish NAME VERSION STAMP: a new image in the simulator's IMGAPI (checks_init copies it to the real one)
publish() { aa sim publish --to "$SIM_IMGAPI_URL" --version "$2" --stamp "$3" "$1" > /dev/null; }

checks_init() (
  set -e
  mapfile -t ALL < <(json "http://127.0.0.1:$CNAPI_PORT/servers" '"\n".join(sorted(s["uuid"] for s in d))')
  printf 'S1=%s\nS2=%s\nS3=%s\n' "${ALL[0]}" "${ALL[1]}" "${ALL[2]}" > "$RT_RUN/servers"
  # S1 as a SunOS compute node: agentsadm then gates and bootstraps through execute
  sysinfo_set "${ALL[0]}" "System Type" SunOS
  publish cn-agent 2.15.0 20260301T000000Z
  publish vm-agent 1.0.0 20260301T000000Z
  publish vm-agent 1.1.0 20260302T000000Z
  # "agentsadm first" bootstraps the stand-in: pack it as an agentsadm image
  local d="$RT_ROOT/stand-in-image" m f u
  rm -rf "$d"; mkdir -p "$d"
  aa installer release --binary "$RT_LIB/ur/gz-stand-in.sh" --semver 9.0.0 --branch rt \
    --timestamp 20260303T000000Z --git-sha 0000000 --out "$d" > /dev/null
  m=$(ls "$d"/*.manifest); f=$(ls "$d"/*.tar.gz)
  u=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["uuid"])' "$m")
  curl -sf -X POST -H 'Content-Type: application/json' --data-binary @"$m" "$SIM_IMGAPI_URL/images/$u?action=import" > /dev/null
  curl -sf -X PUT -H 'Content-Type: application/octet-stream' --data-binary @"$f" \
    "$SIM_IMGAPI_URL/images/$u/file?compression=gzip&sha1=$(sha1sum "$f" | cut -d' ' -f1)&size=$(stat -c %s "$f")" > /dev/null
  curl -sf -X POST "$SIM_IMGAPI_URL/images/$u?action=activate" > /dev/null
  echo "STAND_IN=$u" >> "$RT_RUN/servers"
  put "$SIM_SAPI_URL/services/$(json "$SIM_SAPI_URL/services?name=agentsadm&type=agent" 'd[0]["uuid"]')" \
    "{\"action\":\"update\",\"params\":{\"image_uuid\":\"$u\"}}"
  # both sides start alike: the simulator's datacenter copied into the real IMGAPI and SAPI
  if [ "$RT_SAPI" = real ]; then
    python3 "$RT_LIB/fill-real.py" "$SIM_IMGAPI_URL" "$SIM_SAPI_URL" "$REAL_IMGAPI_URL" "$REAL_SAPI_URL" > "$RT_LOGS/fill-real.log"
    # A new headnode's SAPI starts in proto mode (its local store) and its
    # setup ends by switching it to full mode: its objects move into moray,
    # and sdcadm's update procedures refuse a SAPI in proto mode.
    # In full mode SAPI reads its own zone's instance back from moray (the
    # sdc application's sapi service), which a headnode's setup has created
    # by then: the same here (its zonename, lib/bin/zonename).
    local app svc
    app=$(json "$REAL_SAPI_URL/applications?name=sdc" 'd[0]["uuid"]')
    svc=$(json "$REAL_SAPI_URL/services?name=sapi&application_uuid=$app" 'd[0]["uuid"] if d else ""')
    if [ -z "$svc" ]; then
      svc=$(curl -sf -X POST -H 'Content-Type: application/json' \
        -d "{\"name\":\"sapi\",\"application_uuid\":\"$app\",\"type\":\"vm\",\"params\":{}}" \
        "$REAL_SAPI_URL/services" | python3 -c 'import json,sys; print(json.load(sys.stdin)["uuid"])')
    fi
    curl -sf -X POST -H 'Content-Type: application/json' \
      -d "{\"uuid\":\"$RT_ZONE\",\"service_uuid\":\"$svc\",\"params\":{\"alias\":\"sapi0\"}}" \
      "$REAL_SAPI_URL/instances" > /dev/null
    curl -sf -X POST "$REAL_SAPI_URL/mode?mode=full" > /dev/null
    local i mode=
    for ((i = 0; i < 60; i++)); do
      mode=$(curl -sf "$REAL_SAPI_URL/mode") && [ "$mode" = '"full"' ] && break
      sleep 1
    done
    [ "$mode" = '"full"' ] || { echo "SAPI did not switch to full mode (GET /mode: $mode; see $RT_LOGS/sapi.log)" >&2; exit 1; }
  fi
  # ur-agent must see S1 as SunOS too, with the stand-in fresh
  ur_stop "${ALL[0]}"; RT_FRESH_OPT=1 ur_start "${ALL[0]}"
  sleep 3
)
# shellcheck source=/dev/null # written by checks_init
load_servers() { source "$RT_RUN/servers"; }

check_registrations() {  # cn-agent's agent_install registers in server.agents with image and instance UUIDs
  load_servers
  aa install cn-agent --image 2.15.0 -y -s "$S3" --task-timeout 3m > "$1/install.out" 2>&1 || { echo "install cn-agent on S3: exit $? ($1/install.out)"; return 1; }
  json "http://127.0.0.1:$CNAPI_PORT/servers/$S3" '[(a["name"], a.get("image_uuid"), a.get("uuid")) for a in d["agents"]]' > "$1/agents"
  local ok
  ok=$(json "http://127.0.0.1:$CNAPI_PORT/servers/$S3" 'any(a["name"]=="cn-agent" and a.get("image_uuid") and a.get("uuid") for a in d["agents"])')
  echo "S3 server.agents: $(cat "$1/agents")"
  [ "$ok" = True ]
}

check_bootstrap() {  # the first execute-carried step bootstraps agentsadm on a SunOS CN and registers it
  load_servers
  aa install cn-agent --image 2.15.0 -y -s "$S1" --task-timeout 3m > "$1/install.out" 2>&1
  local rc=$? reg
  reg=$(json "http://127.0.0.1:$CNAPI_PORT/servers/$S1" '[a.get("image_uuid") for a in d["agents"] if a["name"]=="agentsadm"]')
  echo "install cn-agent on S1 exit $rc; server.agents agentsadm image $reg (stand-in $STAND_IN); gz calls $(grep -c 'argv=\[gz' "$RT_UR/$S1/calls.log" 2> /dev/null)"
  [ "$rc" = 0 ] && [ "$reg" = "['$STAND_IN']" ]
}

mode_run() {  # mode_run OUT NAME CNAPI_MODE SAPI_FLAG ARGS...: a gated step on S1, CNAPI supervised
  local out=$1 name=$2 mode=$3 sapi=$4; shift 4
  if [ "$(cat "$RT_RUN/cnapi.mode")" != "$mode" ]; then cnapi_stop; cnapi_start "$mode"; fi
  flag "$sapi"; sleep 11  # agentsadm re-reads SAPI's flag every 10 s
  local pid0 ex0 from rc
  pid0=$(cnapi_pid); ex0=$(cnapi_exits); from=$(calls_mark)
  aa "$@" -y -s "$S1" --task-timeout 3m > "$out/$name.out" 2>&1; rc=$?
  sleep 3
  read -r n t < <(executes "$from")
  MODE_RC=$rc MODE_PID0=$pid0 MODE_PID1=$(cnapi_pid) MODE_EXITS=$(($(cnapi_exits) - ex0)) MODE_N=$n MODE_T=$t
  echo "agentsadm exit $rc; CNAPI pid $pid0 -> $MODE_PID1, exits $MODE_EXITS; executes $n, with timeout $t"
}
check_execute_ur() {  # CNAPI in Ur mode, SAPI flag off: no `timeout`, CNAPI lives
  load_servers
  aa remove vm-agent -y -s "$S1" --task-timeout 3m > "$1/unprep.out" 2>&1
  mode_run "$1" run ur off install vm-agent --image 1.0.0
  [ "$MODE_RC" = 0 ] && [ "$MODE_PID0" = "$MODE_PID1" ] && [ "$MODE_EXITS" = 0 ] && [ "$MODE_N" -ge 1 ] && [ "$MODE_T" = 0 ]
}
check_execute_window() {  # SAPI flag on, CNAPI not yet rewritten (config-agent's window): still no `timeout`
  load_servers
  mode_run "$1" run ur on update vm-agent --image 1.1.0
  [ "$MODE_RC" = 0 ] && [ "$MODE_PID0" = "$MODE_PID1" ] && [ "$MODE_EXITS" = 0 ] && [ "$MODE_T" = 0 ]
}
check_execute_cn_agent() {  # CNAPI in cn-agent mode, flag on: `timeout` sent, CNAPI lives (the mock cn-agent answers 666 to every command)
  load_servers
  mode_run "$1" run cn-agent on update vm-agent --image 1.0.0
  local ok=0
  [ "$MODE_PID0" = "$MODE_PID1" ] && [ "$MODE_EXITS" = 0 ] && [ "$MODE_T" -ge 1 ] && ok=1
  cnapi_stop; cnapi_start ur; flag off
  [ "$ok" = 1 ]
}
check_path() {  # Ur gives a script only the request's env: agentsadm gz ran with the global zone's PATH
  load_servers
  local p
  p=$(grep 'argv=\[gz' "$RT_UR/$S1/calls.log" | tail -1 | sed -n 's/.* path=\[\([^]]*\)\].*/\1/p')
  echo "last gz call's PATH: $p"
  case ":$p:" in *:/usr/bin:*:/opt/smartdc/agents/bin:*) return 0 ;; esac
  return 1
}
check_exit_113() {  # agentsadm gz exiting 113 is never passed to Ur as a reboot request
  load_servers
  local u0 b0 rc
  u0=$(ur_pid "$S1"); b0=$(ur_boots "$S1")
  stand_in "$S1" exit:113
  aa update vm-agent --image 1.1.0 -y -s "$S1" --task-timeout 3m > "$1/run.out" 2>&1; rc=$?
  stand_in "$S1" real
  sleep 3
  echo "agentsadm exit $rc; ur-agent pid $u0 -> $(ur_pid "$S1"), reboots $(($(ur_boots "$S1") - b0))"
  [ "$rc" != 0 ] && [ "$u0" = "$(ur_pid "$S1")" ] && [ "$(ur_boots "$S1")" = "$b0" ]
}

# job_of NAME UUID: the newest workflow job NAME-* for server UUID, as "uuid execution failed-task"
job_of() {
  get "http://127.0.0.1:$WF_PORT/jobs" | python3 -c '
import json, sys
name, server = sys.argv[1], sys.argv[2]
jobs = [j for j in json.load(sys.stdin)
        if j.get("name", "").startswith(name) and (j.get("params") or {}).get("server_uuid") == server]
if not jobs:
    print("none none -"); sys.exit()
j = max(jobs, key=lambda j: j.get("created_at", ""))
bad = [t["name"] + ": " + str(t.get("error"))[:120].replace(" ", "_") for t in j.get("chain_results") or [] if t.get("error")]
print(j["uuid"], j["execution"], bad[0] if bad else "-")' "$1" "$2"
}
wait_job() {  # wait_job NAME UUID SECONDS: until that job has ended; prints job_of's line
  local i line
  for ((i = 0; i < $3; i++)); do
    line=$(job_of "$1" "$2")
    case "$line" in *" queued "* | *" running "* | "none none -") sleep 1 ;; *) break ;; esac
  done
  echo "$line"
}

mid_task() {  # mid_task OUT NAME URL_PART ARGS...: CNAPI restarted while cn-agent holds the task
  local out=$1 name=$2 part=$3; shift 3
  local ca from pid i rc
  ca=$(cat "$RT_RUN/cn-agent.pid"); from=$(calls_mark)
  kill -STOP "$ca"
  aa "$@" -y --task-timeout 5m > "$out/$name.out" 2>&1 &
  pid=$!
  for ((i = 0; i < 120; i++)); do
    tail -n +"$((from + 1))" "$RT_LOGS/cnapi-calls.jsonl" | grep -q "$part" && break
    # the proxy logs an exchange when it ends: look at what CNAPI received instead
    grep -q "$part" <(tail -n 200 "$RT_LOGS/cnapi.log") && break
    sleep 0.5
  done
  sleep 1; cnapi_stop; cnapi_start ur > /dev/null; kill -CONT "$ca"
  wait "$pid"; rc=$?
  echo "$rc"
}
check_restart_install() {  # the install task CNAPI lost (restart) is settled from the server
  load_servers
  aa remove vm-agent -y -s "$S3" --task-timeout 3m > "$1/unprep.out" 2>&1
  local rc v
  rc=$(mid_task "$1" run install-agent install vm-agent --image 1.1.0 -s "$S3")
  v=$(agents "$S3")
  echo "agentsadm exit $rc; S3 server.agents: $v"
  [ "$rc" = 0 ] && [[ "$v" == *"vm-agent@$(image_of vm-agent 1.1.0-master-20260302)"* ]]
}
check_restart_remove() {  # the uninstall task CNAPI lost is settled: reported removed, server.agents and SAPI follow
  load_servers
  local rc v n
  rc=$(mid_task "$1" run uninstall remove vm-agent -s "$S3")
  v=$(agents "$S3"); n=$(instances vm-agent "$S3")
  echo "agentsadm exit $rc; S3 server.agents: $v; SAPI vm-agent instances for S3: $n"
  [ "$rc" = 0 ] && [[ "$v" != *vm-agent@* ]] && [ "$n" = 0 ]
}
check_uninstall_floor() {  # no uninstall sent to a server without cn-agent >= 2.8.0 (CNAPI would die)
  load_servers
  aa install vm-agent --image 1.0.0 -y -s "$S2" --task-timeout 3m > "$1/prep.out" 2>&1
  local pid0 ex0 rc
  pid0=$(cnapi_pid); ex0=$(cnapi_exits)
  aa remove vm-agent -y -s "$S2" --task-timeout 3m > "$1/run.out" 2>&1; rc=$?
  echo "remove on S2 (no cn-agent entry): exit $rc, says: $(grep -m1 -o 'lists no cn-agent' "$1/run.out"); CNAPI pid $pid0 -> $(cnapi_pid), exits $(($(cnapi_exits) - ex0))"
  [ "$rc" != 0 ] && grep -q 'lists no cn-agent' "$1/run.out" && [ "$pid0" = "$(cnapi_pid)" ] && [ "$(cnapi_exits)" = "$ex0" ]
}
check_ur_down() {  # an execute to a server whose ur-agent is down gives up within minutes, naming svcs ur
  load_servers
  ur_stop "$S1"
  local t0 rc
  t0=$(date +%s)
  aa install gz-tools -y -s "$S1" --task-timeout 30m > "$1/run.out" 2>&1; rc=$?
  local took=$(($(date +%s) - t0))
  ur_start "$S1"
  echo "agentsadm exit $rc after $took s (task timeout 30m); names svcs ur: $(grep -c "svcs ur" "$1/run.out")"
  [ "$rc" != 0 ] && [ "$took" -lt 300 ] && grep -q "svcs ur" "$1/run.out"
}
check_disable_enable() {  # disable marks SAPI and keeps the services off; enable lifts it
  load_servers
  local r1 r2 d1 d2
  aa disable vm-agent -y -s "$S1" --task-timeout 3m > "$1/disable.out" 2>&1; r1=$?
  d1=$(param vm-agent "$S1" agentsadm_disabled)
  aa enable vm-agent -y -s "$S1" --task-timeout 3m > "$1/enable.out" 2>&1; r2=$?
  d2=$(param vm-agent "$S1" agentsadm_disabled)
  echo "disable exit $r1 (mark $d1); enable exit $r2 (mark $d2)"
  [ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$d1" != "[None]" ] && [ "$d1" != "[]" ] && [ "$d2" = "[None]" ]
}
check_hold() {  # a held server is skipped by a bulk update
  load_servers
  local before after other rc
  aa hold vm-agent -s "$S1" --reason real-triton "${HOLD_Y[@]}" > "$1/hold.out" 2>&1 || { echo "hold: exit $?"; return 1; }
  before=$(agents "$S1" | tr ' ' '\n' | grep '^vm-agent@')
  aa update vm-agent --image 1.0.0 -y --task-timeout 3m > "$1/update.out" 2>&1; rc=$?
  after=$(agents "$S1" | tr ' ' '\n' | grep '^vm-agent@')
  other=$(agents "$S2" | tr ' ' '\n' | grep '^vm-agent@')
  aa release vm-agent -s "$S1" "${HOLD_Y[@]}" > "$1/release.out" 2>&1
  echo "update exit $rc; held S1 $before -> $after; S2 $other"
  [ "$rc" = 0 ] && [ "$before" = "$after" ] && [ -n "$after" ]
}
check_history_revert() {  # history lists the runs; revert puts back the images a run replaced
  load_servers
  aa update vm-agent --image 1.1.0 -y -s "$S2" --task-timeout 3m > "$1/update.out" 2>&1 || { echo "update: exit $?"; return 1; }
  aa history > "$1/history.out" 2>&1 || { echo "history: exit $?"; return 1; }
  local run rc v
  run=$(aa --json history | python3 -c 'import json,sys; d=json.load(sys.stdin); r=d["runs"] if isinstance(d,dict) else d; print(r[0]["id"] if "id" in r[0] else r[0]["run_id"])')
  aa revert "$run" -y --task-timeout 3m > "$1/revert.out" 2>&1; rc=$?
  v=$(agents "$S2" | tr ' ' '\n' | grep '^vm-agent@')
  echo "history: $(($(wc -l < "$1/history.out") - 1)) runs; revert $run exit $rc; S2 $v (1.0.0 is $(image_of vm-agent 1.0.0-master-20260301))"
  [ "$rc" = 0 ] && [ "$v" = "vm-agent@$(image_of vm-agent 1.0.0-master-20260301)" ]
}
check_factory_reset() {  # SAPI agent instances gone, then CNAPI's server-factory-reset job run by the real runner: its script through Ur, exit 113, the server reboots
  load_servers
  local rc n b0 job
  b0=$(ur_boots "$S2")
  aa server factory-reset "$S2" -y > "$1/run.out" 2>&1; rc=$?
  n=$(for a in vm-agent cn-agent; do instances "$a" "$S2"; done | paste -sd+ | bc)
  read -r -a job < <(wait_job server-factory-reset "$S2" 120)
  sleep 5
  echo "agentsadm exit $rc; SAPI instances left for S2: $n; job ${job[0]} ${job[1]} (${job[2]}); server rebooted: $(($(ur_boots "$S2") - b0))"
  [ "$rc" = 0 ] && [ "$n" = 0 ] && [ "${job[1]}" = succeeded ] && [ "$(ur_boots "$S2")" -gt "$b0" ]
}
marks_kept_for() {  # marks_kept_for UUID: the agent services' params keys naming the server (marks' second copies)
  json "$SAPI_URL/services?type=agent" "sum(1 for s in d for k in (s.get(\"params\") or {}) if k.endswith(\":$1\"))"
}
check_server_delete() {  # the server's SAPI agent instances and the services' copies of its marks go, then its CNAPI record (DELETE 200)
  load_servers
  local rc n code from del kept left held
  held=$(agents "$S3" | tr ' ' '\n' | grep -o '^vm-agent' || echo cn-agent)
  aa hold "$held" -s "$S3" --reason real-triton "${HOLD_Y[@]}" > "$1/hold.out" 2>&1 || { echo "hold $held: exit $?"; return 1; }
  kept=$(marks_kept_for "$S3")
  from=$(calls_mark)
  aa server delete "$S3" -y > "$1/run.out" 2>&1; rc=$?
  n=$(for a in vm-agent cn-agent; do instances "$a" "$S3"; done | paste -sd+ | bc)
  left=$(marks_kept_for "$S3")
  del=$(tail -n +"$((from + 1))" "$RT_LOGS/cnapi-calls.jsonl" | python3 -c '
import json, sys
print(" ".join(str(e.get("status")) for e in map(json.loads, sys.stdin) if e["method"] == "DELETE" and e["url"].startswith("/servers/" + sys.argv[1])) or "none")' "$S3")
  sleep 5
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$CNAPI_PORT/servers/$S3")
  # The mock cn-agent still heartbeats for S3, so CNAPI registers it again (as a
  # real cn-agent left running would): reported, not judged.
  echo "agentsadm exit $rc; SAPI instances left for S3: $n; $held's hold copies on services before/after: $kept/$left; CNAPI ServerDelete answered $del; GET 5 s later: $code"
  [ "$rc" = 0 ] && [ "$n" = 0 ] && [ "$kept" = 1 ] && [ "$left" = 0 ] && [ "$del" = 200 ]
}

# --- CN setup through CNAPI's own server-setup job (real node-workflow runner,
# real Ur, agentsadm's agentsetup.sh from the assets stand-in) ---

new_unsetup_server() {  # a fresh mock server that says it is not set up; prints its UUID
  local before u i
  local d
  before=$(cd "$MOCKCLOUD_ROOT/servers" && echo *)
  (cd "$RT_SRC/sdc-cn-agent" && "${RT_NODE[@]}" lib/backends/dummy/tools/create-server.js >> "$RT_LOGS/create-server.log" 2>&1)
  u=
  for d in "$MOCKCLOUD_ROOT"/servers/*; do
    [[ " $before " == *" ${d##*/} "* ]] || u=${d##*/}
  done
  [ -n "$u" ] || return 1
  sysinfo_set "$u" Setup false
  cn_agent_stop; cn_agent_start  # the mock cn-agent serves the servers it finds at start
  ur_start "$u" > /dev/null || return 1
  for ((i = 0; i < 60; i++)); do
    [ "$(json "http://127.0.0.1:$CNAPI_PORT/servers/$u" 'd["setup"]' 2> /dev/null)" = False ] && break
    sleep 1
  done
  echo "$u"
}
setup_job() {  # setup_job UUID: PUT /servers/UUID/setup, then wait for the job; prints job_of's line
  curl -sf -X PUT -H 'Content-Type: application/json' -d '{}' "http://127.0.0.1:$CNAPI_PORT/servers/$1/setup" > /dev/null ||
    { echo "none refused -"; return; }
  sleep 1
  wait_job server-setup "$1" 600
}
# default_set: the components the catalog installs on every server (placement "all")
default_set() {
  python3 -c 'import json,sys; print(" ".join(sorted(c["name"] for c in json.load(open(sys.argv[1]))["components"] if c["placement"] == "all")))' \
    "$RT_HOME/../../manifests/components.json"
}
# set_up_right UUID: every default component in server.agents from its own image (SAPI's
# default) with an instance UUID, and one SAPI instance each with server_uuid and
# image_uuid; prints what is wrong ("ok" when nothing)
set_up_right() {
  local agents services instances
  agents=$(get "http://127.0.0.1:$CNAPI_PORT/servers/$1")
  services=$(get "$SAPI_URL/services?type=agent")
  instances=$(python3 -c 'import json,sys; print(json.dumps([s["uuid"] for s in json.load(sys.stdin)]))' <<< "$services" |
    python3 -c '
import json, sys, urllib.request
out = []
for svc in json.load(sys.stdin):
    out += json.load(urllib.request.urlopen(sys.argv[1] + "/instances?service_uuid=" + svc))
print(json.dumps(out))' "$SAPI_URL")
  python3 - "$1" "$(default_set)" "$agents" "$services" "$instances" <<'PY'
import json, sys
u, want = sys.argv[1], sys.argv[2].split()
server, services, instances = (json.loads(a) for a in sys.argv[3:6])
by_name = {s["name"]: s for s in services}
agents = {a["name"]: a for a in server.get("agents") or []}
bad = []
for name in want:
    a = agents.get(name)
    default = ((by_name.get(name) or {}).get("params") or {}).get("image_uuid")
    if not a:
        bad.append(name + ": not in server.agents"); continue
    if not a.get("uuid"):
        bad.append(name + ": no instance uuid in server.agents")
    if a.get("image_uuid") != default:
        bad.append("%s: image %s, SAPI default %s" % (name, a.get("image_uuid"), default))
    svc = (by_name.get(name) or {}).get("uuid")
    mine = [i for i in instances if i.get("service_uuid") == svc and (i.get("params") or {}).get("server_uuid") == u]
    if len(mine) != 1:
        bad.append("%s: %d SAPI instances" % (name, len(mine)))
    elif (mine[0].get("params") or {}).get("image_uuid") != a.get("image_uuid"):
        bad.append("%s: SAPI image_uuid %s" % (name, (mine[0].get("params") or {}).get("image_uuid")))
print("ok" if not bad else "; ".join(bad))
PY
}
check_cn_setup() {  # CNAPI's server-setup job sets up a new CN with agentsadm's agentsetup.sh
  load_servers
  local u job right rc1 rc2
  u=$(new_unsetup_server) || { echo "no new mock server"; return 1; }
  echo "S4=$u" >> "$RT_RUN/servers"
  read -r -a job < <(setup_job "$u")
  right=$(set_up_right "$u")
  aa check -s "$u" > "$1/check.out" 2>&1; rc1=$?
  aa update vm-agent --image 1.1.0 -y -s "$u" --task-timeout 3m > "$1/update.out" 2>&1; rc2=$?
  echo "job ${job[0]} ${job[1]} (${job[2]}); setup ${right}; reboots $(ur_boots "$u"); check exit $rc1; update exit $rc2"
  [ "${job[1]}" = succeeded ] && [ "$right" = ok ] && [ "$rc1" = 0 ] && [ "$rc2" = 0 ]
}
check_cn_reset_setup() {  # factory reset through agentsadm (SAPI cleaned, CNAPI's job, wiped at boot), then set up again
  load_servers
  local rc n job i s job2 right
  aa server factory-reset "$S4" -y > "$1/reset.out" 2>&1; rc=$?
  n=$(for a in $(default_set); do instances "$a" "$S4"; done | paste -sd+ | bc)
  read -r -a job < <(wait_job server-factory-reset "$S4" 120)
  for ((i = 0; i < 90; i++)); do
    s=$(json "http://127.0.0.1:$CNAPI_PORT/servers/$S4" 'd["setup"]'); [ "$s" = False ] && break; sleep 1
  done
  sleep 3
  read -r -a job2 < <(setup_job "$S4")
  right=$(set_up_right "$S4")
  echo "reset exit $rc, SAPI instances left $n, job ${job[1]}; CNAPI setup after boot: $s; setup again: job ${job2[1]} (${job2[2]}), $right"
  [ "$rc" = 0 ] && [ "$n" = 0 ] && [ "${job[1]}" = succeeded ] && [ "$s" = False ] && [ "${job2[1]}" = succeeded ] && [ "$right" = ok ]
}
check_cn_setup_failure() {  # an image missing from IMGAPI: the job fails at the agents step, the server stays "setting up"; a second setup succeeds
  load_servers
  local u svc good job log su job2 right
  u=$(new_unsetup_server) || { echo "no new mock server"; return 1; }
  echo "S5=$u" >> "$RT_RUN/servers"
  svc=$(json "$SAPI_URL/services?name=vm-agent&type=agent" 'd[0]["uuid"]')
  good=$(json "$SAPI_URL/services/$svc" 'd["params"]["image_uuid"]')
  put "$SAPI_URL/services/$svc" '{"action":"update","params":{"image_uuid":"00000000-0000-4000-8000-00000000dead"}}'
  read -r -a job < <(setup_job "$u")
  log=$(grep -m1 -o 'vm-agent[^"]*' "$RT_UR/var-$u/upper/log/agent-setup.log" 2> /dev/null | head -c 160)
  cp "$RT_UR/var-$u/upper/log/agent-setup.log" "$1/agent-setup.log" 2> /dev/null
  su=$(json "http://127.0.0.1:$CNAPI_PORT/servers/$u" '(d["setup"], d.get("setting_up"))')
  put "$SAPI_URL/services/$svc" "{\"action\":\"update\",\"params\":{\"image_uuid\":\"$good\"}}"
  read -r -a job2 < <(setup_job "$u")
  right=$(set_up_right "$u")
  echo "job ${job[1]} at ${job[2]}; agent-setup.log: ${log:-nothing on vm-agent}; CNAPI (setup, setting_up) after it: $su; second setup: job ${job2[1]}, $right, setting_up $(json "http://127.0.0.1:$CNAPI_PORT/servers/$u" 'd.get("setting_up")')"
  [ "${job[1]}" = failed ] && [[ ${job[2]} == cnapi.execute_agentsetup_script* ]] && [ -n "$log" ] &&
    [ "${job2[1]}" = succeeded ] && [ "$right" = ok ]
}
