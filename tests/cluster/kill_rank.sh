#!/bin/bash
# Fault injection for the restart tests, used as the templates' DDP_TRAIN: runs REAL_TRAIN (ddp-train) with the
# task's arguments. In the first attempt of the job's first allocation (TORCHELASTIC_RESTART_COUNT 0, and
# SLURM_RESTART_COUNT 0 or unset: a requeued job starts its attempts again), the task of rank KILL_RANK
# kills its ddp-train with SIGKILL (KILL_SIGNAL: another signal, e.g. STOP for a hung rank) as soon as a file matching
# KILL_WHEN (a glob) appears in the snapshot directory, and writes the directory's listing at that moment to KILL_LISTING.
set -u
if [ "$RANK" != "$KILL_RANK" ] || [ "$TORCHELASTIC_RESTART_COUNT" != 0 ] || [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then
  exec "$REAL_TRAIN" "$@"
fi
"$REAL_TRAIN" "$@" &
train=$!
shopt -s nullglob dotglob
while kill -0 "$train" 2>/dev/null; do
  # shellcheck disable=SC2206  # KILL_WHEN is a glob
  matches=("$DDP_SNAPSHOT_DIR"/$KILL_WHEN)
  if [ ${#matches[@]} -gt 0 ]; then
    kill -"${KILL_SIGNAL:-KILL}" "$train"
    ls -A "$DDP_SNAPSHOT_DIR" >"$KILL_LISTING"
    break
  fi
  sleep 0.005
done
wait "$train"
