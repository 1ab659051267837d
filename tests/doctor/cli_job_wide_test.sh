#!/usr/bin/env bash
# Job-wide checks across nodes that differ: three ranks as local processes, each the leader of its node and each in
# mount and UTS namespaces of its own, with its own host name, /etc/hosts (MASTER_ADDR's address), RDMA device (a
# sysfs class tree over /sys/class, the real network interfaces kept in it), NCCL_IB_HCA and ephemeral port range (a
# file over /proc/sys/net/ipv4/ip_local_port_range). node2 differs from node1 and node3 in each of these; rank 0
# names node2 in one row per check, and the run fails. The namespaces end with the ranks.
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null ||
  { echo "SKIP: needs root and unshare (mount and UTS namespaces)"; exit 77; }

WORLD=3
PORT=$(free_port)
# A range without PORT for node1 and node3, one with it for node2.
if [ "$PORT" -lt 61000 ]; then clear_range="61000 61999"; else clear_range="1024 2047"; fi

# enter.sh DIR NAME PROGRAM ARGS...: PROGRAM as node NAME, whose files are in DIR.
cat >"$WORK/enter.sh" <<'SH'
#!/bin/sh
exec unshare --mount --uts --propagation private sh -ec '
  dir=$1 name=$2
  shift 2
  echo "$name" >/proc/sys/kernel/hostname
  mount --bind "$dir/hosts" /etc/hosts
  mount --bind "$dir/ip_local_port_range" /proc/sys/net/ipv4/ip_local_port_range
  mount --rbind /sys/class/net "$dir/net"
  mount -t tmpfs ddp-doctor-class /sys/class
  mkdir /sys/class/net /sys/class/infiniband
  mount --rbind "$dir/net" /sys/class/net
  mount --bind "$dir/infiniband" /sys/class/infiniband
  exec "$@"' sh "$@"
SH
chmod +x "$WORK/enter.sh"

# make_node NAME MASTER_IP "FIRST LAST" PORT_STATE: the node's files, and $WORK/NAME/doctor, ddp-doctor on it.
make_node() {
  local dir=$WORK/$1
  mkdir -p "$dir/net" "$dir/infiniband/mlx5_0/ports/1"
  echo InfiniBand >"$dir/infiniband/mlx5_0/ports/1/link_layer"
  echo "$4" >"$dir/infiniband/mlx5_0/ports/1/state"
  printf '127.0.0.1 localhost\n%s doctor-master\n' "$2" >"$dir/hosts"
  printf '%s\t%s\n' $3 >"$dir/ip_local_port_range"
  printf '#!/bin/sh\nexec %q %q %q %q "$@"\n' "$WORK/enter.sh" "$dir" "$1" "$DOCTOR" >"$dir/doctor"
  chmod +x "$dir/doctor"
}
make_node node1 127.0.0.1 "$clear_range" "4: ACTIVE"
make_node node2 127.0.0.2 "1024 65535" "1: DOWN"
make_node node3 127.0.0.1 "$clear_range" "4: ACTIVE"

for rank in 0 1 2; do
  node=node$((rank + 1))
  hca=mlx5_0
  [ "$node" != node2 ] || hca=mlx5_1
  DOCTOR=$WORK/$node/doctor start_rank "$node" "$rank" 0 MASTER_ADDR=doctor-master NCCL_IB_HCA="$hca" \
    -- --quick --json --timeout 20
done
wait_ranks 90
for node in node2 node3; do
  [ "$(rc_of "$node")" -eq 1 ] || fail "$node exited $(rc_of "$node"), not 1: $(cat "$WORK/$node.out" "$WORK/$node.err")"
done
[ "$(rc_of node1)" -eq 1 ] || fail "rank 0 exited $(rc_of node1), not 1: $(cat "$WORK/node1.out" "$WORK/node1.err")"
grep -q "unshare\|mount:" "$WORK"/node*.err && fail "a node's namespaces were not set up: $(cat "$WORK"/node*.err)"

check_report "$WORK/node1.out" "
hosts = sorted({r['host'] for r in report['results'] if r['check'] == 'cpu.cores'})
assert hosts == ['node1', 'node2', 'node3'], hosts
def job(check):
    found = rows(check)
    assert len(found) == 1, (check, found)
    return found[0]
for check in ('job.rdma', 'job.nccl_ib_hca', 'job.master_addr'):
    assert job(check)['status'] == 'FAIL', job(check)
    assert job(check)['value'] == 'differs on node2', job(check)
rdma = job('job.rdma')['detail']
assert rdma.startswith(\"node2 has 'mlx5_0/1 InfiniBand DOWN'; node1, node3 have 'mlx5_0/1 InfiniBand ACTIVE': \"), rdma
hca = job('job.nccl_ib_hca')['detail']
assert hca.startswith(\"node2 has 'mlx5_1'; node1, node3 have 'mlx5_0': \"), hca
addr = job('job.master_addr')['detail']
assert addr.startswith(\"node2 has '127.0.0.2'; node1, node3 have '127.0.0.1': \"), addr
assert job('job.interface')['status'] == 'OK' and job('job.interface')['value'] == 'lo', job('job.interface')
ports = job('job.port_range')
assert ports['status'] == 'FAIL' and ports['value'] == 'inside on node2', ports
assert 'MASTER_PORT $PORT is inside net.ipv4.ip_local_port_range on node2 1024-65535' in ports['detail'], ports
"
echo "rank 0 named node2 in job.rdma, job.nccl_ib_hca, job.master_addr and job.port_range"
