#!/usr/bin/env bash
# The mpirun path: OpenMPI starts the ranks, MPI carries the exchange, the checks are the same.
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }

# CI runs as root; OpenMPI refuses that unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Containers often forbid the cross-memory attach that OpenMPI's shared-memory transport tries first.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
PORT=$(free_port)
mkdir -p "$WORK/snap"
rc=0
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 \
  -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$PORT" -x DDP_SNAPSHOT_DIR="$WORK/snap" -x OMP_NUM_THREADS=1 \
  "$DOCTOR" --quick --json --timeout 20 >"$WORK/mpi.out" 2>"$WORK/mpi.err" || rc=$?
[ "$rc" -eq 0 ] || fail "mpirun exited $rc: $(cat "$WORK/mpi.out" "$WORK/mpi.err")"
check_report "$WORK/mpi.out" "
assert report['launcher'] == 'mpi' and report['world_size'] == 2 and report['ok'] is True
assert row('net.master_port', 0)['value'] == 'listening on $PORT'
assert row('storage.dir', 0)['status'] == 'OK'
assert row('gpu.visible', 1)['status'] == 'OK'  # rank 1 shares rank 0's node: only its own task checks
assert rows('storage.dir', 1) == []
busbw = rows('allreduce.gloo')
assert [r['status'] for r in busbw] == ['OK'] * 3 and all('2 ranks' in r['detail'] for r in busbw), busbw
for r in busbw:
    print('figure:', r['check'], r['value'], '|', r['detail'])
"

# Without MASTER_ADDR and MASTER_PORT: rank 0's store listens on a port the kernel picks, and MPI tells the others.
rc=0
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x DDP_SNAPSHOT_DIR="$WORK/snap" -x OMP_NUM_THREADS=1 \
  "$DOCTOR" --quick --json --timeout 20 >"$WORK/shared.out" 2>"$WORK/shared.err" || rc=$?
[ "$rc" -eq 0 ] || fail "mpirun without MASTER_ADDR exited $rc: $(cat "$WORK/shared.out" "$WORK/shared.err")"
check_report "$WORK/shared.out" "
assert report['launcher'] == 'mpi' and report['ok'] is True
assert row('net.master_port', 0)['status'] == 'SKIP'
assert row('net.rendezvous', 0)['status'] == 'OK', row('net.rendezvous', 0)
assert [r['status'] for r in rows('allreduce.gloo')] == ['OK'] * 3
"
echo "mpirun: OK"
