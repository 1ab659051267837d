#!/usr/bin/env bash
# A node slowed by a busy neighbour is named, and the nodes that keep pace are not: three ranks, each the leader of
# its "node", measure their GEMM and memory bandwidth at the same time. Ranks 0 and 2 share CPU 0 (each gets half of
# it); rank 1 runs at nice 10 on CPU 1 beside a busy loop at nice 0 (it gets 110/(110+1024), a tenth of it): rank 1 is
# far below the median (half a CPU's speed), ranks 0 and 2 are the median. The loop ends with the test.
set -euo pipefail
# A session of its own, whose autogroup is raised (nice -10) where this may: the kernel shares the CPUs between
# sessions (autogroups) before it shares them between their processes, and CI runs another suite at the same time.
# Raised, this test's ranks and loops share the CPUs as it sets them up, whatever else runs; at the default, another
# suite's load on CPU 0 once made rank 1 the fastest. The slowdown is one loop and a niceness rather than several
# loops: the kernel splits the session's weight between CPUs by the weight of its processes runnable on each, and five
# loops on CPU 1 left CPU 0 a quarter of it, so other suites' load on CPU 0 (local rank 0 of every test node is bound
# there) once brought ranks 0 and 2 down to rank 1's speed.
if [ -z "${DDP_OWN_SESSION:-}" ]; then DDP_OWN_SESSION=1 exec setsid -w "$0" "$@"; fi
echo -10 >/proc/self/autogroup 2>/dev/null || true
DOCTOR=$1
. "$(dirname "$0")/lib.sh"
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 CPUs, one for the slowed node"; exit 77; }
BUSY=1
neighbours=()
stop_neighbours() { [ ${#neighbours[@]} -eq 0 ] || kill "${neighbours[@]}" 2>/dev/null || true; }
trap 'stop_neighbours; cleanup_work' EXIT
for ((i = 0; i < BUSY; i++)); do
  taskset -c 1 sh -c 'while :; do :; done' &
  neighbours+=($!)
  disown $!  # not a rank: wait_ranks waits for this shell's jobs
done

WORLD=3
PORT=$(free_port)
CPUS=0 start_rank slow0 0 0 -- --quick --json --timeout 20
CPUS=1 NICE=10 start_rank slow1 1 0 -- --quick --json --timeout 20
CPUS=0 start_rank slow2 2 0 -- --quick --json --timeout 20
wait_ranks 60
stop_neighbours
# Exit status 1 is the doctor's "a check failed": a rank slowed to a sixth of a CPU may fail a check of its links
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
