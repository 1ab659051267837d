#!/usr/bin/env bash
# A healthy run over the TCP exchange: three ranks as local processes, ranks 0 and 1 on one "node" (LOCAL_RANK 0
# and 1) and rank 2 on another, a snapshot directory all of them share, and the fake NVML on the library path.
set -euo pipefail
DOCTOR=$1
FAKE_NVML_DIR=$2
. "$(dirname "$0")/lib.sh"

WORLD=3
PORT=$(free_port)
SNAP=$WORK/snapshots
mkdir -p "$SNAP"
start=$(date +%s)
for rank_local in "0 0" "1 1" "2 0"; do
  set -- $rank_local
  start_rank "rank$1" "$1" "$2" DDP_SNAPSHOT_DIR="$SNAP" LD_LIBRARY_PATH="$FAKE_NVML_DIR" -- --quick --json --timeout 20
done
wait_ranks 60
echo "3 ranks took $(( $(date +%s) - start ))s"
for rank in 0 1 2; do
  [ "$(rc_of rank$rank)" -eq 0 ] || fail "rank $rank exited $(rc_of rank$rank): $(cat "$WORK/rank$rank.out" "$WORK/rank$rank.err")"
done
[ ! -s "$WORK/rank1.out" ] && [ ! -s "$WORK/rank2.out" ] || fail "only rank 0 prints the report"
[ -z "$(ls -A "$SNAP")" ] || fail "the doctor left files in the snapshot directory: $(ls -A "$SNAP")"
grep -q "ddp-doctor: link 1/2: rank 0" "$WORK/rank0.err" || fail "no progress on stderr: $(cat "$WORK/rank0.err")"

check_report "$WORK/rank0.out" "
assert report['ok'] is True and report['world_size'] == 3
assert report['launcher'] == 'tcp 127.0.0.1:$PORT', report['launcher']
assert not [r for r in report['results'] if r['status'] == 'FAIL']
for rank in (0, 1, 2):
    assert row('net.master_port', rank)['status'] == 'OK'
    assert row('cpu.omp_threads', rank)['status'] == 'OK'
# Node checks run once per node, on its LOCAL_RANK 0; the task's own GPU view on every rank.
for rank in (0, 2):
    assert row('storage.dir', rank)['status'] == 'OK'
    assert row('storage.shared', rank)['value'] == '1 of 1 other node(s)'
    assert row('net.interface', rank)['value'] == 'lo up 127.0.0.1'
    assert row('clock.offset', rank)['status'] == 'OK'
    assert row('gpu.driver', rank)['value'] == 'driver 550.54.15, CUDA 12.4, 2 GPU(s) NVIDIA H100 80GB HBM3'
    assert row('gpu.memory', rank)['status'] == 'WARN'
    assert row('storage.write_bw', rank)['value'].endswith('MB/s')
assert rows('storage.dir', 1) == [] and rows('storage.shared', 1) == [] and rows('clock.offset', 1) == []
assert row('gpu.visible', 1)['status'] == 'OK'
# The ring of node leaders: 0 -> 2 and 2 -> 0. Figures depend on the machine's load: printed, not asserted.
links = rows('net.p2p_bw')
assert [r['rank'] for r in links] == [0, 2] and all(r['status'] in ('OK', 'WARN') for r in links), links
assert links[0]['value'].endswith('to rank 2 (' + links[1]['host'] + ')')
assert len(rows('net.p2p_rtt')) == 2
busbw = rows('allreduce.gloo')
assert [r['status'] for r in busbw] == ['OK'] * 3 and all('3 ranks' in r['detail'] for r in busbw), busbw
assert row('net.rendezvous', 0)['status'] == 'OK'
for r in links + rows('net.p2p_rtt') + busbw + rows('storage.write_bw'):
    print('figure:', r['rank'], r['check'], r['value'], '|', r['detail'])
"

# The same run for people: one table on rank 0, a summary line, exit status 0.
WORLD=2
PORT=$(free_port)
start_rank table0 0 0 DDP_SNAPSHOT_DIR="$SNAP" -- --quick --timeout 20
start_rank table1 1 0 DDP_SNAPSHOT_DIR="$SNAP" -- --quick --timeout 20
wait_ranks 60
[ "$(rc_of table0)" -eq 0 ] && [ "$(rc_of table1)" -eq 0 ] || fail "table run failed: $(cat "$WORK"/table0.*)"
head -1 "$WORK/table0.out" | grep -q "^HOST *RANK *CHECK *STATUS *VALUE *THRESHOLD *DETAIL$" || fail "no table header"
tail -1 "$WORK/table0.out" | grep -q "^ddp-doctor: 1 node(s), 2 rank(s) via tcp 127.0.0.1:$PORT: [0-9]* OK, [0-9]* WARN, 0 FAIL" \
  || fail "summary: $(tail -1 "$WORK/table0.out")"
echo "tcp ranks: OK"
