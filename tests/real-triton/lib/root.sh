# shellcheck shell=bash
# Sourced by run.sh: make RT_ROOT this run's own. A root is reused only for its
# prepared sources ($RT_ROOT/src): everything else a run leaves (moray's
# database, mock servers, Ur state, the simulator's state, SAPI and IMGAPI
# data, history) is removed first, since the checks name servers by sorted
# UUID and would otherwise act on an earlier run's. A root whose recorded
# processes still run belongs to a run that is not over: refused.

root_busy() {  # prints what still runs from an earlier run of this root
  local f p
  for f in "$RT_ROOT"/run/*.pid "$RT_ROOT/rabbit/pid"; do
    [ -f "$f" ] || continue
    p=$(head -1 "$f" 2> /dev/null)
    [[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2> /dev/null && echo "$(basename "$f" .pid) (pid $p)"
  done
  f="$RT_ROOT/pg/data/postmaster.pid"
  if [ -f "$f" ]; then
    p=$(head -1 "$f")
    [[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2> /dev/null && echo "postgres (pid $p)"
  fi
  return 0
}

root_claim() {
  case "$RT_ROOT" in
    /*) ;;
    *) echo "RT_ROOT must be an absolute path, not $RT_ROOT" >&2; return 1 ;;
  esac
  [ "$RT_ROOT" != / ] || { echo "RT_ROOT must not be /" >&2; return 1; }
  if [ -d "$RT_ROOT" ] && [ -n "$(ls -A "$RT_ROOT")" ] && [ ! -f "$RT_ROOT/.real-triton-root" ]; then
    echo "RT_ROOT $RT_ROOT is not empty and is not a harness root (no .real-triton-root): choose another" >&2
    return 1
  fi
  local busy
  busy=$(root_busy)
  if [ -n "$busy" ]; then
    echo "RT_ROOT $RT_ROOT is in use by another run; still running: $(echo "$busy" | paste -sd, -)." >&2
    echo "Let that run end (or stop it), or set another RT_ROOT." >&2
    return 1
  fi
  mkdir -p "$RT_ROOT"
  touch "$RT_ROOT/.real-triton-root"
  find "$RT_ROOT" -mindepth 1 -maxdepth 1 ! -name src ! -name .real-triton-root -exec rm -rf {} +
}
