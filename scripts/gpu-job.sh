#!/usr/bin/env bash
# On the device machine: one command that outlives the device tool's call (at most 10 minutes
# a call; the machine stays while calls follow each other). Its output goes to
# /tmp/gpu-job/log and, at each poll, to $OUT/gpu-job.log when OUT is set.
#   bash scripts/gpu-job.sh start 'COMMAND' [SECONDS]  # starts COMMAND (setsid), then polls
#   bash scripts/gpu-job.sh poll [SECONDS]             # waits up to SECONDS (default 540) for
#                                                      # the end; prints what is new in the log
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
J=/tmp/gpu-job
mkdir -p "$J"
poll() {
  local limit=${1:-540} start=$SECONDS seen
  seen=$(cat "$J/seen" 2>/dev/null || echo 0)
  while [[ ! -f $J/rc ]] && ((SECONDS - start < limit)); do sleep 5; done
  tail -c +"$((seen + 1))" "$J/log"
  wc -c < "$J/log" > "$J/seen"
  [[ -n ${OUT:-} ]] && cp "$J/log" "$OUT/gpu-job.log"
  if [[ -f $J/rc ]]; then echo "[gpu-job] ended, rc=$(cat "$J/rc")"; else echo "[gpu-job] still running: poll again"; fi
}
case ${1:-} in
  start)
    [[ -f $J/pid && ! -f $J/rc ]] && kill -0 "$(cat "$J/pid")" 2>/dev/null &&
      { echo "[gpu-job] one is running: poll it"; exit 1; }
    rm -f "$J/rc" "$J/seen"
    setsid bash -c "($2) > $J/log 2>&1; echo \$? > $J/rc" < /dev/null > /dev/null 2>&1 &
    echo $! > "$J/pid"
    poll "${3:-540}" ;;
  poll) poll "${2:-540}" ;;
  *) echo "usage: gpu-job.sh start 'COMMAND' [SECONDS] | poll [SECONDS]"; exit 2 ;;
esac
