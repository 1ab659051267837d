#!/usr/bin/env bash
# A reinstall and an upgrade while a job trains: the job's ranks (ddp-train from /opt/slurm-ddp/bin, in steps whose
# slurmstepd loaded ddp.so from the shared /opt/slurm) go on untouched, the replaced files keep a name for them, a
# new step loads the new ddp.so, and once the job is asked to stop (the preemption signal) it requeues and resumes
# from its snapshot with the new ddp-train.
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
TEMPLATES=/opt/slurm-ddp/source/sbatch_templates
BIN=/opt/slurm-ddp/bin
ARGS=(port_range=20000-29999 "snapshot_dir=$DDP_CLUSTER_SHARED/%u/ddp-snapshots/%x-%j")
ACTION=$TEST_DIR/pcluster-head-node.sh
tar -xzf "$PCLUSTER_TARBALL" -O slurm-ddp/sbatch_templates/parallelcluster/pcluster-head-node.sh >"$ACTION"
chmod 0755 "$ACTION"

# Each environment is read whole before it is searched: in `tr | grep -q` under pipefail, grep's early exit can fail
# tr, and a process is missed.
ranks_of() {  # JOBID: the job's ddp-train processes
  local pid environ
  for pid in $("$CLUSTER_SH" pgrep -u "$DDP_CLUSTER_USER" -x ddp-train); do
    environ=$({ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null) || continue
    grep -qFx "SLURM_JOB_ID=$1" <<<"$environ" && echo "$pid"
  done | sort -n | tr '\n' ' '
}

wait_for() {  # SECONDS WHAT CMD...
  local end=$((SECONDS + $1)) what=$2
  shift 2
  until "$@"; do [ "$SECONDS" -lt "$end" ] || fail "timed out after $1 s waiting for $what"; sleep 0.5; done
}

dir=$TEST_DIR/run
install -d -o "$DDP_CLUSTER_USER" "$dir"
job=$(submit DDP_TRAIN="$BIN/ddp-train" DDP_RESTART="$BIN/ddp-restart" SNAPSHOT_DIR="$dir/snapshots" DEVICE=cpu \
  EPOCHS=1000000 SAVE_EVERY=20 --chdir="$dir" --cpus-per-task=2 "$TEMPLATES/multi-node.sbatch")
has_ranks() { [ "$(wc -w <<<"$(ranks_of "$job")")" = 2 ]; }
wait_for 120 "job $job's two ranks" has_ranks
ranks=$(ranks_of "$job")
has_snapshot() { compgen -G "$dir/snapshots/snapshot-*.pt" >/dev/null; }
wait_for 120 "job $job's first snapshot" has_snapshot
echo "job $job trains: ranks $ranks"

# A reinstall of what is installed: nothing changes.
out=$("$ACTION" "$PCLUSTER_TARBALL" "$(sha256sum "$PCLUSTER_TARBALL" | cut -d' ' -f1)" --ddp-train-python /usr/bin/python3 "${ARGS[@]}" 2>&1) ||
  fail "the reinstall: $out"
assert_contains "$out" "unchanged: this tarball is installed as given" "the reinstall"

# An upgrade: a tarball whose ddp.so and ddp-train differ (a symbol more in one source of each).
mkdir "$TEST_DIR/upgrade"
tar -xzf "$PCLUSTER_TARBALL" -C "$TEST_DIR/upgrade"
for source in spank_plugin/common.cpp runtime/ddp-train/main.cpp; do
  echo 'extern "C" const char ddp_upgrade_marker[] = "upgraded";' >>"$TEST_DIR/upgrade/slurm-ddp/$source"
done
tar -czf "$TEST_DIR/upgrade.tar.gz" -C "$TEST_DIR/upgrade" slurm-ddp
old_plugin=$(stat -c %i /opt/slurm/lib/slurm/ddp.so)
old_train=$(stat -c %i "$BIN/ddp-train")
start=$SECONDS
out=$("$ACTION" "$TEST_DIR/upgrade.tar.gz" "$(sha256sum "$TEST_DIR/upgrade.tar.gz" | cut -d' ' -f1)" \
  --ddp-train-python /usr/bin/python3 "${ARGS[@]}" 2>&1) || fail "the upgrade: $out"
echo "$out"
upgrade=$((SECONDS - start))
assert_contains "$out" "installed: /opt/slurm/lib/slurm/ddp.so (the previous one stays as /opt/slurm/lib/slurm/ddp.so." "ddp.so replaced"
assert_contains "$out" "installed: $BIN/ddp-train (the previous one stays as $BIN/ddp-train." "ddp-train replaced"
[ "$(stat -c %i /opt/slurm/lib/slurm/ddp.so)" != "$old_plugin" ] || fail "ddp.so was written in place"
[ -n "$(find /opt/slurm/lib/slurm -maxdepth 1 -inum "$old_plugin")" ] || fail "the old ddp.so lost its last name"
[ -n "$(find "$BIN" -maxdepth 1 -inum "$old_train")" ] || fail "the old ddp-train lost its last name"

# The job trains on, in the same processes, each still running a file with a name (the kernel shows the path it
# was started by as "(deleted)": that name now holds the new file; the old inode's other name keeps it on NFS).
assert_eq "$ranks" "$(ranks_of "$job")" "job $job's ranks after the upgrade"
for pid in $ranks; do
  assert_eq "$old_train" "$(stat -L -c %i "/proc/$pid/exe")" "rank process $pid runs the ddp-train it started with"
  assert_eq 1 "$(stat -L -c %h "/proc/$pid/exe")" "names of the program rank process $pid runs"
done
count=$(compgen -G "$dir/snapshots/snapshot-*.pt" | wc -l)
newest() { ls -t "$dir"/snapshots/snapshot-*.pt 2>/dev/null | head -n 1; }
before=$(newest)
moved_on() { [ "$(newest)" != "$before" ]; }
wait_for 120 "a snapshot after the upgrade" moved_on
echo "job $job wrote snapshots before ($count) and after the upgrade"

# A new step loads the new ddp.so.
assert_eq $'0\n1' "$(run_on_cluster srun --ddp -N2 -n2 printenv RANK | sort)" "a --ddp step after the upgrade"

# The preemption signal: the job stops at a snapshot, requeues, and resumes with the new ddp-train.
run_on_cluster scancel --batch --signal=USR2 "$job"
requeued() { [ -n "$(ranks_of "$job")" ] && [ "$(ranks_of "$job")" != "$ranks" ]; }
wait_for 180 "job $job to requeue and train again" requeued
for pid in $(ranks_of "$job"); do
  assert_eq "$(stat -c %i "$BIN/ddp-train")" "$(stat -L -c %i "/proc/$pid/exe")" "the requeued job's rank $pid runs the new ddp-train"
done
resumed() { grep -q "Resuming training from snapshot at Epoch" "$dir"/*-"$job".out 2>/dev/null; }
wait_for 60 "the requeued job to resume" resumed
out=$(cat "$dir"/*-"$job".out)
assert_contains "$out" "requeueing job $job" "the job requeued itself"
run_on_cluster scancel "$job"
echo "FIGURE upgrade while a job trains: $upgrade s (ddp.so and ddp-train rebuilt)"
pass "reinstall unchanged; upgrade in $upgrade s under a training job, whose ranks went on; requeued onto the new ddp-train from its snapshot"
