#!/usr/bin/env bash
# An interface that is down, as GLOO_SOCKET_IFNAME names it: FAIL on every node, and the tests that need it
# (point-to-point, Gloo) say why they could not run. Creates an interface of its own (a dummy, or one end of a veth
# pair where the kernel has no dummy driver; named after this shell, since other runs on the machine make theirs at
# the same time) and removes it again.
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to create a network interface"; exit 77; }
DOWN=ddpdn$$
ip link add "$DOWN" type dummy 2>/dev/null || ip link add "$DOWN" type veth peer name "${DOWN}p" 2>/dev/null \
  || { echo "SKIP: neither dummy nor veth interfaces can be created here"; exit 77; }
trap 'ip link del "$DOWN" 2>/dev/null || true; cleanup_work' EXIT

WORLD=2
PORT=$(free_port)
start_rank down0 0 0 GLOO_SOCKET_IFNAME="$DOWN" -- --quick --json --timeout 10
start_rank down1 1 0 GLOO_SOCKET_IFNAME="$DOWN" -- --quick --json --timeout 10
wait_ranks 60
[ "$(rc_of down0)" -eq 1 ] && [ "$(rc_of down1)" -eq 1 ] || fail "exits $(rc_of down0) $(rc_of down1), expected 1 1"
check_report "$WORK/down0.out" "
for rank in (0, 1):
    interface = row('net.interface', rank)
    assert interface['status'] == 'FAIL' and interface['value'] == '$DOWN down', interface
    assert 'ip link set $DOWN up' in interface['detail'] and 'GLOO_SOCKET_IFNAME' in interface['detail']
assert row('net.p2p_bw', None)['status'] == 'SKIP'
gloo = rows('allreduce.gloo')
assert len(gloo) == 1 and gloo[0]['status'] == 'FAIL' and 'no usable address' in gloo[0]['detail'], gloo
"
echo "interface down: OK"
