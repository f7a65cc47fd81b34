#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# run.sh SRC_DIR [CHECK...]: agentsadm against the real Triton services on
# 127.0.0.1. Prepares the sources (once per RT_ROOT), brings the stack up, runs
# every check (or the named ones), prints one line per check and
# "N passed, M failed", then stops what it started. Exit status: 0 when every
# check passed. See README.md for what it needs.
set -uo pipefail
SRC_DIR=${1:?usage: run.sh SRC_DIR [CHECK...] (SRC_DIR: local clones of the public repositories)}
shift
# shellcheck source=lib/env.sh
source "$(dirname "$0")/lib/env.sh"
: "${AGENTSADM:?set AGENTSADM to an agentsadm binary built with the simulator (cargo build)}"
case "$RT_SAPI" in real | sim) ;; *) echo "RT_SAPI is real or sim, not $RT_SAPI" >&2; exit 1 ;; esac
# shellcheck source=lib/root.sh
source "$RT_LIB/root.sh"
root_claim || exit 1
bash "$RT_LIB/prepare.sh" "$SRC_DIR" || exit 1
for p in "$CNAPI_PORT" "$SIM_PORT" "$AMQP_PORT" "$MORAY_PORT" "$PG_PORT" "$REAL_SAPI_PORT" "$REAL_IMGAPI_PORT"; do
  if (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null; then
    echo "port $p is taken: is another stack running? (set RT_PORT)" >&2; exit 1
  fi
done
# A copy of the binary: a rebuild during the run changes nothing.
cp "$AGENTSADM" "$RT_ROOT/agentsadm"; AGENTSADM="$RT_ROOT/agentsadm"; export AGENTSADM
# shellcheck source=lib/stack.sh
source "$RT_LIB/stack.sh"
# shellcheck source=lib/checks.sh
source "$RT_LIB/checks.sh"
# shellcheck source=lib/checks2.sh
source "$RT_LIB/checks2.sh"
# shellcheck source=lib/checks3.sh
source "$RT_LIB/checks3.sh"
trap stack_down EXIT
t0=$(date +%s)
stack_up 3 || { echo "the stack did not come up (logs: $RT_LOGS)"; exit 1; }
checks_init || { echo "the checks' fixtures could not be set up (logs: $RT_LOGS)"; exit 1; }
echo "stack up and fixtures ready in $(($(date +%s) - t0)) s (SAPI and IMGAPI: $RT_SAPI)"
[ $# -gt 0 ] || set -- "${RT_CHECKS[@]}"
passed=0 failed=0
for c in "$@"; do
  out="$RT_ROOT/checks/$c"; mkdir -p "$out"
  if ! declare -F "check_${c//-/_}" > /dev/null; then
    echo "FAIL $c: no such check (checks: ${RT_CHECKS[*]})"; failed=$((failed + 1)); continue
  fi
  t=$(date +%s)
  if detail=$("check_${c//-/_}" "$out" 2> "$out/stderr"); then
    echo "PASS $c ($(($(date +%s) - t)) s): $detail"; passed=$((passed + 1))
  else
    echo "FAIL $c ($(($(date +%s) - t)) s): $detail"; failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed ($(($(date +%s) - t0)) s)"
# RT_HOLD=1 keeps the stack up after the checks, for working on one by hand
# (source lib/env.sh with the same RT_ROOT and RT_PORT), until $RT_ROOT/hold goes.
if [ "${RT_HOLD:-0}" = 1 ]; then
  touch "$RT_ROOT/hold"; echo "stack held: rm $RT_ROOT/hold to stop it"
  while [ -e "$RT_ROOT/hold" ]; do sleep 2; done
fi
[ "$failed" = 0 ]
