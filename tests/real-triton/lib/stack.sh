# shellcheck shell=bash
# Sourced by run.sh: start and stop the loopback stack. Every process started
# here has its PID in $RT_RUN/<name>.pid; `stack_down` stops exactly those
# (and the PostgreSQL cluster and rabbitmq node under $RT_ROOT).

bg() {  # bg NAME CMD...: start CMD in the background, log to $RT_LOGS/NAME.log
  local name=$1; shift
  nohup "$@" >> "$RT_LOGS/$name.log" 2>&1 &
  echo $! > "$RT_RUN/$name.pid"
}
wait_port() {  # wait_port PORT [SECONDS]
  local i
  for ((i = 0; i < ${2:-30} * 4; i++)); do
    (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null && return 0
    sleep 0.25
  done
  echo "nothing listens on 127.0.0.1:$1 (see $RT_LOGS)" >&2
  return 1
}
stop_pid() {  # stop_pid NAME: the recorded process (and its children)
  local f="$RT_RUN/$1.pid" p kids
  [ -f "$f" ] || return 0
  p=$(cat "$f"); mapfile -t kids < <(pgrep -P "$p" || true)
  kill "$p" "${kids[@]}" 2> /dev/null || true
  for _ in 1 2 3 4 5 6 7 8; do kill -0 "$p" 2> /dev/null || break; sleep 0.25; done
  rm -f "$f"
}
pg() { runuser -u postgres -- "$(dirname "$(command -v pg_ctl)")/pg_ctl" -D "$RT_ROOT/pg/data" "$@"; }

rabbit() {  # rabbit start|stop: Debian's rabbitmq-server, loopback, state under $RT_ROOT/rabbit
  local R="$RT_ROOT/rabbit" B=/usr/lib/rabbitmq/bin
  mkdir -p "$R/mnesia" "$R/log"
  # ur-agent's bundled amqp client asks for channel_max 0, which RabbitMQ >= 3.7
  # accepts only when its own limit is 0 too.
  printf 'listeners.tcp.1 = 127.0.0.1:%s\nchannel_max = 0\nloopback_users.guest = true\n' "$AMQP_PORT" > "$R/rabbitmq.conf"
  echo '[].' > "$R/plugins"
  # The node's Erlang cookie, written once before anything starts: the server
  # and rabbitmqctl each create a missing one, and the server then read a
  # half-written one once ("Too short cookie string", the stack did not start).
  if [ ! -s "$R/.erlang.cookie" ]; then
    (umask 077; tr -dc A-Z < /dev/urandom | head -c 20 > "$R/.erlang.cookie")
  fi
  (
    export HOME="$R" RABBITMQ_NODENAME="rt$RT_PORT@localhost" RABBITMQ_MNESIA_BASE="$R/mnesia" \
      RABBITMQ_LOG_BASE="$R/log" RABBITMQ_CONFIG_FILE="$R/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$R/plugins" \
      RABBITMQ_PID_FILE="$R/pid" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$AMQP_PORT" \
      RABBITMQ_DIST_PORT="$DIST_PORT" ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$EPMD_PORT" \
      RABBITMQ_CTL_DIST_PORT_MIN=$((DIST_PORT + 1)) RABBITMQ_CTL_DIST_PORT_MAX=$((DIST_PORT + 9)) \
      RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    if [ "$1" = start ]; then
      bg rabbit "$B/rabbitmq-server"
      "$B/rabbitmqctl" -q wait --timeout 90 "$R/pid"
    else
      # `rabbitmqctl stop PIDFILE` waits for that pid: bounded, then the pid itself
      timeout 60 "$B/rabbitmqctl" -q stop "$R/pid" > /dev/null 2>&1 ||
        { [ -f "$R/pid" ] && kill "$(cat "$R/pid")" 2> /dev/null; }
      epmd -port "$EPMD_PORT" -kill > /dev/null 2>&1 || true
      rm -f "$RT_RUN/rabbit.pid"
    fi
  )
}

cnapi_start() {  # cnapi_start ur|cn-agent: CNAPI under a supervisor that restarts it 2 s after it exits (as SMF does)
  python3 "$RT_LIB/cnapi-config.py" "$1"
  echo "$1" > "$RT_RUN/cnapi.mode"
  # shellcheck disable=SC2016 # expanded by the supervisor shell
  (cd "$RT_SRC/sdc-cnapi" &&
    bg cnapi bash -c 'while true; do "$@"; echo "cnapi exited $? at $(date -u +%T)" >> "$RT_LOGS/cnapi-exits.log"; sleep 2; done' \
      supervise "${RT_NODE[@]}" bin/cnapi.js)
  local i
  for ((i = 0; i < 60; i++)); do curl -sf "http://127.0.0.1:$CNAPI_PORT/ping" > /dev/null && return 0; sleep 0.5; done
  echo "CNAPI did not answer /ping (see $RT_LOGS/cnapi.log)" >&2; return 1
}
cnapi_stop() { stop_pid cnapi; }
cnapi_pid() { pgrep -P "$(cat "$RT_RUN/cnapi.pid")" -f bin/cnapi.js | head -1; }
cnapi_exits() { grep -c . "$RT_LOGS/cnapi-exits.log" 2> /dev/null || echo 0; }

cn_agent_start() {
  (cd "$RT_SRC/sdc-cn-agent" && bg cn-agent "${RT_NODE[@]}" lib/backends/dummy/tools/run-servers.js)
}
cn_agent_stop() { stop_pid cn-agent; }

ur_start() {  # ur_start UUID: the real ur-agent as that mock server, in its own mount namespace
  local u=$1 log="$RT_LOGS/ur-$1.log" from
  touch "$log"; from=$(wc -l < "$log")
  # UR_DEBUG=1: ur-agent answers an exit status 113 (a reboot request) by
  # exiting instead of running shutdown on this machine; the loop then
  # "boots" the server (ur/boot.sh) and starts ur-agent again.
  # shellcheck disable=SC2016 # expanded by the loop's shell
  (cd "$RT_SRC/sdc-ur-agent" &&
    UR_DEBUG=1 AMQP_HOST=127.0.0.1 NODE_PATH="$RT_SRC/sdc-cnapi/node_modules" \
      bg "ur-$u" bash -c 'while true; do
          unshare -m --propagation private bash "$RT_LIB/ur/in-ns.sh" "$0" node "$RT_LIB/node/ur-run.js" "$0"
          sleep 2; bash "$RT_LIB/ur/boot.sh" "$0"
        done' "$u")
  # Ready once its queue is bound: CNAPI's requests before that are dropped.
  local i
  for ((i = 0; i < 80; i++)); do
    tail -n +$((from + 1)) "$log" | grep -q 'Sending startup message' && return 0
    sleep 0.25
  done
  echo "ur-agent for $u did not start (see $log)" >&2; return 1
}
ur_pid() { pgrep -P "$(cat "$RT_RUN/ur-$1.pid")" | head -1; }  # the ur-agent node process
ur_boots() { grep -c . "$RT_UR/$1/boots.log" 2> /dev/null || echo 0; }
ur_stop() { stop_pid "ur-$1"; }

real_apis_start() {  # the real IMGAPI (dc mode) and SAPI (proto mode), empty; checks_init fills them
  mkdir -p "$RT_ROOT/sapi" "$RT_ROOT/imgapi/tmp"
  python3 "$RT_LIB/imgapi-config.py" "$RT_RUN/imgapi.json"
  (cd "$RT_SRC/sdc-imgapi" &&
    IMGAPITEST_LOCAL_BASE_DIR="$RT_ROOT/imgapi" IMGAPI_TMPDIR="$RT_ROOT/imgapi/tmp" \
      bg imgapi "${RT_NODE[@]}" main.js -f "$RT_RUN/imgapi.json")
  SAPI_LOCAL_ROOT="$RT_ROOT/sapi" bg sapi "${RT_NODE[@]}" "$RT_LIB/node/sapi-main.js"
  wait_port "$REAL_IMGAPI_PORT" 60 && wait_port "$REAL_SAPI_PORT" 60
}

assets_tree() {  # the assets zone's /extra, as CNAPI's server-setup job fetches it
  local A="$RT_ROOT/assets/extra"
  mkdir -p "$A/joysetup" "$A/agentsadm" "$RT_ROOT/cn_tools/bin"
  install -m 755 "$RT_LIB/assets/joysetup.sh" "$A/joysetup/joysetup.sh"
  install -m 755 "$RT_HOME/../../installer/agentsetup.sh" "$A/joysetup/agentsetup.sh"
  printf 'datacenter_name=%s\ndns_domain=%s\nsapi_domain=127.0.0.1:%s\nimgapi_domain=127.0.0.1:%s\n' \
    "$RT_DC" "$RT_DNS" "$SAPI_PORT" "$IMGAPI_PORT" > "$A/joysetup/node.config"
  echo "gz-tools stand-in (real-triton harness)" > "$RT_ROOT/cn_tools/bin/README"
  tar czf "$A/joysetup/cn_tools.tar.gz" -C "$RT_ROOT/cn_tools" bin
  # the agentsadm a new CN fetches: the harness's stand-in (ur/gz-stand-in.sh)
  install -m 755 "$RT_LIB/ur/gz-stand-in.sh" "$A/agentsadm/agentsadm"
}

stack_up() (  # stack_up N_SERVERS (a subshell: the first failure stops it)
  set -e
  mkdir -p "$RT_RUN" "$RT_LOGS" "$MOCKCLOUD_ROOT/servers" "$XDG_STATE_HOME"
  echo 'pg' > "$RT_RUN/started"
  pg -l "$RT_ROOT/pg/pg.log" -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $RT_ROOT/pg" -w start > /dev/null
  local psql=(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qAt)
  [ "$("${psql[@]}" -c "select 1 from pg_roles where rolname='moray'")" = 1 ] || "${psql[@]}" -c "create role moray login superuser"
  [ "$("${psql[@]}" -c "select 1 from pg_database where datname='moray'")" = 1 ] || "${psql[@]}" -c "create database moray owner moray"
  # moray standalone expects its bucket table (a manatee deployment creates it)
  "${psql[@]}" -d moray -c "CREATE TABLE IF NOT EXISTS buckets_config (name text PRIMARY KEY, index text NOT NULL, pre text NOT NULL, post text NOT NULL, options text, mtime timestamp without time zone DEFAULT now() NOT NULL)"
  printf '{"port":%s,"bindip":"127.0.0.1","monitorPort":%s,"bunyan":{"level":"info"},"server_uuid":"rt","datacenter":"rt","standalone":{"url":"tcp://moray@127.0.0.1:%s/moray","pg":{"maxConnections":15,"maxIdleTime":120000,"connectTimeout":3000,"checkInterval":30000}}}\n' \
    "$MORAY_PORT" $((MORAY_PORT + 1)) "$PG_PORT" > "$RT_RUN/moray.json"
  (cd "$RT_SRC/moray" && bg moray "${RT_NODE[@]}" main.js -f "$RT_RUN/moray.json"); wait_port "$MORAY_PORT"
  # node-workflow: on moray, its API and its runner as two processes (a
  # workflow zone's two services); RT_WF_BACKEND=memory: one process
  if [ "${RT_WF_BACKEND:-moray}" = memory ]; then
    bg wf "${RT_NODE[@]}" "$RT_LIB/node/wfapi.js" both; wait_port "$WF_PORT"
  else
    bg wf "${RT_NODE[@]}" "$RT_LIB/node/wfapi.js" api; wait_port "$WF_PORT"
    bg wf-runner "${RT_NODE[@]}" "$RT_LIB/node/wfapi.js" runner
  fi
  bg stubs node "$RT_LIB/node/stubs.js"; wait_port "$STUB_PORT"
  assets_tree
  bg assets python3 -m http.server --bind 127.0.0.1 --directory "$RT_ROOT/assets" "$ASSETS_PORT"; wait_port "$ASSETS_PORT"
  mkdir -p "$RT_ROOT/sim"
  bg sim "$AGENTSADM" sim serve --servers 2 --seed 1 --port "$SIM_PORT" --state "$RT_ROOT/sim"; wait_port "$SIM_PORT"
  [ "$RT_SAPI" = sim ] || real_apis_start
  echo rabbit >> "$RT_RUN/started"; rabbit start
  cnapi_start ur
  bg proxy node "$RT_LIB/node/proxy.js" "$CNAPI_PROXY" "http://127.0.0.1:$CNAPI_PORT" "$RT_LOGS/cnapi-calls.jsonl"; wait_port "$CNAPI_PROXY"
  local have
  have=$(find "$MOCKCLOUD_ROOT/servers" -mindepth 1 -maxdepth 1 | wc -l)
  while [ "$have" -lt "$1" ]; do
    (cd "$RT_SRC/sdc-cn-agent" && "${RT_NODE[@]}" lib/backends/dummy/tools/create-server.js >> "$RT_LOGS/create-server.log" 2>&1)
    have=$((have + 1))
  done
  cn_agent_start
  local i n
  for ((i = 0; i < 60; i++)); do
    n=$(curl -s "http://127.0.0.1:$CNAPI_PORT/servers" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2> /dev/null || echo 0)
    [ "$n" -ge "$1" ] && break; sleep 1
  done
  for u in "$MOCKCLOUD_ROOT"/servers/*; do ur_start "$(basename "$u")"; done
)

stack_down() {
  local f
  cnapi_stop
  for f in "$RT_RUN"/*.pid; do [ -f "$f" ] && stop_pid "$(basename "$f" .pid)"; done
  grep -qx rabbit "$RT_RUN/started" 2> /dev/null && rabbit stop
  grep -qx pg "$RT_RUN/started" 2> /dev/null && pg stop -m fast > /dev/null 2>&1
  rm -f "$RT_RUN/started"
}
