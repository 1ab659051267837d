#!/usr/bin/env bash
# ddp-doctor across the two nodes under srun --ddp: a healthy run passes (its bandwidth and latency figures on the
# veth network are printed, not asserted); a node-private snapshot directory, an interface that is down on one
# node, a master port that one node cannot reach, and a node whose ephemeral port range and NCCL_IB_HCA differ from
# the other's are each a FAIL with the reason and exit status 1.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
[ -n "$DDP_PLUGIN" ] || skip "the plugin is not built"
[ -x "${DDP_BUILD_DIR:-}/src/doctor/ddp-doctor" ] || skip "ddp-doctor is not built"
doctor=$(stage "$DDP_BUILD_DIR/src/doctor/ddp-doctor")
STEP=(srun --ddp=gloo -N2 --ntasks-per-node=2)
QUICK=(--quick --timeout 10 --snapshot-size 1M)

# expect_report OUTPUT PYTHON: PYTHON asserts over `report` (the first JSON report in OUTPUT: rank 0's, or the
# only one) and `rows(check, status)`, the [rank, value, detail] of the rows of that check and status in every
# report of OUTPUT (a rank that cannot reach rank 0 prints its own).
expect_report() {
  /usr/bin/python3 - "$1" "$2" <<'EOF' || fail "unexpected report: $1"
import json, sys
reports = [json.loads(line) for line in sys.argv[1].splitlines() if line.startswith("{")]
report = reports[0]
def rows(check, status):
    return [[r["rank"], r["value"], r["detail"]] for each in reports for r in each["results"]
            if r["check"] == check and r["status"] == status]
exec(sys.argv[2])
EOF
}

# doctor_fails WHAT SRUN-AND-DOCTOR-ARGS...: the step fails; FAILED_OUTPUT holds every task's standard output in task
# order, each written to a file of its own (PER_TASK). Ranks that print their reports at once would otherwise have
# their long --json lines cut into each other: srun forwards a task's output in messages of at most 1 KiB, and those
# of different tasks come interleaved.
PER_TASK=(--output=task-%t.out --error=task-%t.err)
doctor_fails() {
  local what=$1
  shift
  rm -f "$TEST_DIR"/task-*.out "$TEST_DIR"/task-*.err
  if run_on_cluster timeout 120 "$@" >"$TEST_DIR/srun.out" 2>&1; then
    fail "$what: succeeded but should have failed; output: $(cat "$TEST_DIR/srun.out" "$TEST_DIR"/task-*)"
  fi
  FAILED_OUTPUT=$(cat "$TEST_DIR"/task-*.out)
}

# --- healthy: every check passes on both nodes --------------------------------------------------------------
install -d -o "$DDP_CLUSTER_USER" "$TEST_DIR/snap"
table=$(run_on_cluster timeout 120 "${STEP[@]}" "$doctor" "${QUICK[@]}" --snapshot-dir "$TEST_DIR/snap" 2>&1) ||
  fail "a healthy cluster fails the doctor: $table"
echo "$table"
json=$(run_on_cluster timeout 120 "${STEP[@]}" "$doctor" "${QUICK[@]}" --json --snapshot-dir "$TEST_DIR/snap") ||
  fail "a healthy cluster fails the doctor (--json): $json"
expect_report "$json" "
assert report['ok'] is True and report['world_size'] == 4 and report['nodes'] == 2, report
assert [rank for rank, _, _ in rows('storage.shared', 'OK')] == [0, 2], rows('storage.shared', 'OK')
assert [rank for rank, _, _ in rows('storage.locks', 'OK')] == [2], rows('storage.locks', 'OK')
assert len(rows('net.master_port', 'OK')) == 4, rows('net.master_port', 'OK')
"

# --- a node-private directory (on a tmpfs per node at the same path; the plugin makes it the user's own, as the
# snapshot directory rules ask, so storage.dir passes): not shared ---------------------------------------------
private=$DDP_CLUSTER_LOCAL/$TEST_NAME.$$
on_exit "on_node node1 rm -rf '$private'; on_node node2 rm -rf '$private'"
doctor_fails "node-private snapshot directory" srun --ddp=gloo --ddp-snapshot-dir="$private" -N2 --ntasks-per-node=2 \
  "${PER_TASK[@]}" "$doctor" "${QUICK[@]}" --json
expect_report "$FAILED_OUTPUT" "
assert report['ok'] is False
failed = rows('storage.shared', 'FAIL')
assert len(failed) == 2 and all('not the same directory on every node' in detail for _, _, detail in failed), failed
"

# --- eth1 down on node2: FAIL on node2 (checked once per node), naming the interface and the fix --------------------------
on_exit 'on_node node2 ip link set eth1 up'
on_node node2 ip link set eth1 down
doctor_fails "eth1 down on node2" "${STEP[@]}" "${PER_TASK[@]}" "$doctor" "${QUICK[@]}" --json --interface eth1 \
  --snapshot-dir "$TEST_DIR/snap"
expect_report "$FAILED_OUTPUT" "
failed = rows('net.interface', 'FAIL')
assert [rank for rank, _, _ in failed] == [2], failed
assert all(value == 'eth1 down' and 'ip link set eth1 up' in detail for _, value, detail in failed), failed
assert [rank for rank, _, _ in rows('net.interface', 'OK')] == [0], rows('net.interface', 'OK')
"
on_node node2 ip link set eth1 up

# --- node2 is pointed at a port where nothing listens: unreachable, and rank 0 says who never came ----------
cat >"$TEST_DIR/wrong_port.sh" <<EOF
#!/bin/sh
# node2's ranks look for rank 0 at a port nobody listens on
if [ "\$NODE_RANK" = 1 ]; then exec $doctor "\$@" --master-port 1; fi
exec $doctor "\$@"
EOF
chmod 0755 "$TEST_DIR/wrong_port.sh"
# --ddp-keep-going: rank 0's view too (by default srun ends the step when node2's ranks exit with their report).
doctor_fails "master port unreachable from node2" "${STEP[@]}" --ddp-keep-going "${PER_TASK[@]}" "$TEST_DIR/wrong_port.sh" \
  "${QUICK[@]}" --timeout 3 --json --snapshot-dir "$TEST_DIR/snap"
expect_report "$FAILED_OUTPUT" "
failed = rows('net.master_port', 'FAIL')
seen_by_rank0 = sorted(rank for rank, value, _ in failed if value == 'never connected')
own = sorted(rank for rank, _, detail in failed if 'cannot reach rank 0 at node1:1 within 3 s' in detail)
assert seen_by_rank0 == [2, 3] and own == [2, 3], failed
"
# --- node2 differs from node1 where a job needs them alike: its ephemeral port range holds MASTER_PORT (given with
# --ddp-port: srun --ddp refuses a derived port_range that overlaps a node's range before the doctor could run) and
# its ranks see another NCCL_IB_HCA; rank 0 names node2 in job.port_range and job.nccl_ib_hca ---------------------
range=$(on_node node2 cat /proc/sys/net/ipv4/ip_local_port_range)
on_exit "on_node node2 sh -c 'echo \"$range\" >/proc/sys/net/ipv4/ip_local_port_range'"
on_node node2 sh -c 'echo "1024 65000" >/proc/sys/net/ipv4/ip_local_port_range'
cat >"$TEST_DIR/node_hca.sh" <<EOF
#!/bin/sh
# node2's ranks are given another HCA than node1's
if [ "\$NODE_RANK" = 1 ]; then export NCCL_IB_HCA=mlx5_1; else export NCCL_IB_HCA=mlx5_0; fi
exec $doctor "\$@"
EOF
chmod 0755 "$TEST_DIR/node_hca.sh"
doctor_fails "node2 unlike node1" "${STEP[@]}" --ddp-port=12001 --ddp-keep-going "${PER_TASK[@]}" "$TEST_DIR/node_hca.sh" \
  "${QUICK[@]}" --json --snapshot-dir "$TEST_DIR/snap"
on_node node2 sh -c "echo '$range' >/proc/sys/net/ipv4/ip_local_port_range"
expect_report "$FAILED_OUTPUT" "
ports = rows('job.port_range', 'FAIL')
assert len(ports) == 1 and ports[0][1] == 'inside on node2', ports
assert 'MASTER_PORT 12001 is inside net.ipv4.ip_local_port_range on node2 1024-65000' in ports[0][2], ports
hca = rows('job.nccl_ib_hca', 'FAIL')
assert len(hca) == 1 and hca[0][2].startswith(\"node2 has 'mlx5_1'; node1 has 'mlx5_0': \"), hca
assert [value for _, value, _ in rows('job.master_addr', 'OK')] == ['10.77.0.1'], rows('job.master_addr', 'OK')
"
pass "healthy run passes; node-private directory, interface down, unreachable port, and node2 unlike node1 each FAIL"
