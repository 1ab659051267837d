#!/usr/bin/env bash
# The test cluster is what later tests take it for: separate hosts with their own names, addresses, second NIC
# and local disk, one shared directory, jobs as the unprivileged user, reserved ports, room for two concurrent
# steps, and a plugstack.conf that each step reads again.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

check_hostnames() {
  assert_eq $'node1\nnode2' "$(run_on_cluster srun -N2 -n2 hostname | sort)" "hostnames of a 2-node step"
}

check_user() {
  assert_eq $'ddpuser\nddpuser' "$(run_on_cluster srun -N2 -n2 id -un)" "user running the tasks"
  run_on_cluster srun -N1 -w node1 touch "$TEST_DIR/owned"
  assert_eq "$DDP_CLUSTER_USER" "$(stat -c %U "$TEST_DIR/owned")" "owner of a file a task created"
}

check_shared_storage() {
  run_on_cluster srun -N1 -w node1 sh -c "echo shared-token >'$TEST_DIR/token'"
  assert_eq shared-token "$(run_on_cluster srun -N1 -w node2 cat "$TEST_DIR/token")" "shared file read on node2"
}

check_local_storage() {
  local private=$DDP_CLUSTER_LOCAL/$TEST_NAME.$$
  run_on_cluster srun -N1 -w node1 sh -c "echo local-token >'$private'"
  on_exit "rm -f '$private'"  # the host's own directory at that path, in case the tmpfs was missing
  assert_eq local-token "$(on_node node1 cat "$private")" "node-private file on node1"
  run_on_cluster srun -N1 -w node2 test ! -e "$private" || fail "node2 sees node1's private file $private"
  [ ! -e "$private" ] || fail "the host sees node1's private file $private"
  assert_eq $'node1\nnode2' "$(run_on_cluster srun -N2 -n2 cat "$DDP_CLUSTER_LOCAL/.node" | sort)" \
    "each node's $DDP_CLUSTER_LOCAL/.node"
}

check_interfaces() {
  local k addrs
  for k in 1 2; do
    addrs=$(run_on_cluster srun -N1 -w "node$k" ip -4 -o addr show | awk '$2 != "lo" {print $2, $4}')
    assert_eq "eth0 $DDP_CLUSTER_NET0.$k/24"$'\n'"eth1 $DDP_CLUSTER_NET1.$k/24" "$addrs" "IPv4 interfaces of node$k"
  done
  # Names resolve alike on every node, and the master's name is reached through eth0, not eth1.
  assert_eq "$DDP_CLUSTER_NET0.1" "$(run_on_cluster srun -N1 -w node2 getent ahostsv4 node1 | awk 'NR==1 {print $1}')" \
    "node1 as resolved on node2"
  assert_match "$(run_on_cluster srun -N1 -w node2 ip route get "$DDP_CLUSTER_NET0.1")" " dev eth0 " \
    "route from node2 to node1"
  assert_match "$(run_on_cluster srun -N1 -w node2 ip route get "$DDP_CLUSTER_NET1.1")" " dev eth1 " \
    "route from node2 to node1's second address"
  # A TCP exchange over the second network between the two tasks of one step.
  cat >"$TEST_DIR/eth1_pingpong.py" <<PY
import os, socket, time
addr = ("$DDP_CLUSTER_NET1.1", int(os.environ["SLURM_STEP_RESV_PORTS"].split("-")[0]))
if os.environ["SLURM_PROCID"] == "0":
    with socket.create_server(addr) as srv:
        srv.settimeout(30)
        conn, peer = srv.accept()
        conn.sendall(b"pong from " + socket.gethostname().encode())
        print("server saw", peer[0])
else:
    for _ in range(200):
        try:
            c = socket.create_connection(addr, timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    print("client got", c.recv(100).decode(), "via", c.getsockname()[0])
PY
  assert_eq "client got pong from node1 via $DDP_CLUSTER_NET1.2"$'\n'"server saw $DDP_CLUSTER_NET1.2" \
    "$(run_on_cluster timeout 60 srun -N2 -n2 python3 "$TEST_DIR/eth1_pingpong.py" | sort)" \
    "TCP between node2 and node1 over eth1"
}

check_reserved_ports() {
  local ports
  ports=$(run_on_cluster srun -N2 -n2 printenv SLURM_STEP_RESV_PORTS | sort -u)
  assert_match "$ports" '^[0-9]+(-[0-9]+)?$' "SLURM_STEP_RESV_PORTS of a plain srun, the same on both nodes"
}

# Two 2x1 steps inside one 2x2 allocation: each waits for the other's file, so they pass only if they overlap.
check_concurrent_steps() {
  local id state
  cat >"$TEST_DIR/two-steps.sh" <<EOF
#!/bin/bash
rendezvous() { touch "$TEST_DIR/\$1.\$(hostname)"; for i in \$(seq 100); do [ -e "$TEST_DIR/\$2.\$(hostname)" ] && exit 0; sleep 0.1; done; exit 1; }
export -f rendezvous
srun -N2 -n2 --exact bash -c 'rendezvous a b' &
srun -N2 -n2 --exact bash -c 'rendezvous b a' &
wait -n && wait -n
EOF
  chmod 0755 "$TEST_DIR/two-steps.sh"
  id=$(submit -N2 --ntasks-per-node=2 -o "$TEST_DIR/two-steps.out" "$TEST_DIR/two-steps.sh")
  state=$(wait_job "$id" 60)
  assert_eq COMPLETED "$state" "job with two concurrent steps (output: $(cat "$TEST_DIR/two-steps.out" 2>/dev/null))"
  assert_eq "$DDP_CLUSTER_USER" "$(stat -c %U "$TEST_DIR/two-steps.out")" "owner of the batch output"
}

# The plugin is loaded when CTest knows one, and plugstack.conf is read again by the next step.
check_plugstack() {
  if [ -z "$DDP_CLUSTER_PLUGIN" ]; then
    [ -z "$DDP_PLUGIN" ] || fail "CTest built $DDP_PLUGIN but the cluster runs without a plugin"
    echo "no plugin: plugstack checks left out"
    return 0
  fi
  assert_contains "$(run_on_cluster srun --help 2>&1)" "--ddp" "srun --help with the plugin"
  set_plugstack
  assert_not_contains "$(run_on_cluster srun --help 2>&1)" "--ddp" "srun --help with an empty plugstack.conf"
  set_plugstack "required $DDP_CLUSTER_PLUGIN"
  assert_contains "$(run_on_cluster srun --help 2>&1)" "--ddp" "srun --help with the plugin back"
}

check_hostnames
check_user
check_shared_storage
check_local_storage
check_interfaces
check_reserved_ports
check_concurrent_steps
check_plugstack
pass "nodes, storage, network, user, ports, concurrent steps, plugstack"
