#!/usr/bin/env bash
# A node slowed by a CPU quota is named, and the nodes that keep pace are not: three ranks, each the leader of its
# "node", measure their GEMM and memory bandwidth at the same time. Ranks 0 and 2 share CPU 0 in a cgroup with the
# highest CPU weight (each gets half of what the cgroup gets, which is nearly all of CPU 0 whatever else runs there);
# rank 1 runs on CPU 1 in a cgroup with a quota of 5% of a CPU (cpu.max, or cpu.cfs_quota_us under cgroup v1), the
# way a node shared with another job's cgroup is slowed. Both hold under any load: the quota is a ceiling (rank 1 can
# only be slower, never faster), the weight a floor (another suite's processes on CPU 0 take little from ranks 0
# and 2). Rank 1 is then about 90% below the median. (Niceness and a busy loop beside rank 1, in a session whose
# autogroup was raised, did not hold: under another suite's load rank 1's memory bandwidth once came within 20% of
# the median, and ranks 0 and 2 were once brought down to a sixth of a CPU each.)
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 CPUs, one for the slowed node"; exit 77; }

# cgroup v2 where the cpu controller can be enabled below its root, else v1's cpu hierarchy; nothing when neither.
CGROUP_ROOT=""
if [ -e /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers &&
  echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
  CGROUP_ROOT=/sys/fs/cgroup
elif [ -w /sys/fs/cgroup/cpu ]; then
  CGROUP_ROOT=/sys/fs/cgroup/cpu
fi
[ -n "$CGROUP_ROOT" ] || { echo "SKIP: no cgroup with CPU controls can be made here (needs root and the cpu controller)"; exit 77; }
groups=()
remove_groups() {  # once their processes have ended (a cgroup with processes cannot be removed)
  local group _
  for group in "${groups[@]}"; do
    for _ in $(seq 100); do
      if [ ! -d "$group" ] || rmdir "$group" 2>/dev/null; then break; fi
      sleep 0.1
    done
    [ ! -d "$group" ] || echo "warning: $group was not removed: $(cat "$group/cgroup.procs")" >&2
  done
}
trap 'cleanup_work; remove_groups' EXIT
# new_group NAME V2_FILE V2_VALUE V1_FILE V1_VALUE...: a cgroup with those settings; its directory in $group.
new_group() {
  group=$CGROUP_ROOT/ddp-slow-node.$$.$1
  mkdir "$group"
  groups+=("$group")
  if [ "$CGROUP_ROOT" = /sys/fs/cgroup ]; then echo "$3" >"$group/$2"; return; fi
  shift 3
  while [ $# -gt 0 ]; do echo "$2" >"$group/$1"; shift 2; done
}
new_group slow cpu.max "5000 100000" cpu.cfs_period_us 100000 cpu.cfs_quota_us 5000
slow=$group
new_group kept-pace cpu.weight 10000 cpu.shares 262144
kept_pace=$group

WORLD=3
PORT=$(free_port)
CPUS=0 CGROUP=$kept_pace start_rank slow0 0 0 -- --quick --json --timeout 20
CPUS=1 CGROUP=$slow start_rank slow1 1 0 -- --quick --json --timeout 20
CPUS=0 CGROUP=$kept_pace start_rank slow2 2 0 -- --quick --json --timeout 20
wait_ranks 60
# Exit status 1 is the doctor's "a check failed": a rank slowed to a twentieth of a CPU may fail a check of its links
# under CI's load besides, which is not this test's subject; any other status, or no report, is.
case "$(rc_of slow0)" in
  0) ;;
  1) python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["status"] == "FAIL": print("note: besides the slow node, FAIL", r["check"], "rank", r["rank"], r["value"], r["detail"])
' "$WORK/slow0.out" || fail "rank 0 exited 1 without a report: $(cat "$WORK/slow0.out" "$WORK/slow0.err")" ;;
  *) fail "rank 0 exited $(rc_of slow0): $(cat "$WORK/slow0.out" "$WORK/slow0.err")" ;;
esac
check_report "$WORK/slow0.out" "
for check in ('node.compute', 'node.memory_bw'):
    slow = row(check, 1)
    assert slow['status'] == 'WARN', slow
    assert '% below the median of 3 nodes (' in slow['detail'] and 'other jobs' in slow['detail'], slow
    for rank in (0, 2):
        kept_pace = row(check, rank)
        assert kept_pace['status'] == 'OK' and 'the median of 3 nodes is ' in kept_pace['detail'], kept_pace
    print('figure:', check, [row(check, rank)['value'] for rank in (0, 1, 2)])
"
echo "slow node: OK"
