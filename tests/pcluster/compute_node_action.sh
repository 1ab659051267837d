#!/usr/bin/env bash
# The compute-node action (install-compute-node.sh) on every node of the cluster, as ParallelCluster runs it at each
# node's bootstrap: it sees the plugin and the programs the head node installed on the shared /opt/slurm and
# /opt/slurm-ddp. On a node without the plugin's hwloc library (hidden in a mount namespace of that run only) it
# fails in one line naming this system's package, and passes once the library is there again.
set -euo pipefail
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
ACTION=/opt/slurm-ddp/source/sbatch_templates/parallelcluster/install-compute-node.sh
[ -x "$ACTION" ] || fail "no $ACTION: the head-node action did not install the source tree"

for k in $(seq "$DDP_CLUSTER_NNODES"); do
  out=$(on_node "node$k" "$ACTION" 2>&1) || fail "node$k: $out"
  assert_eq "install-compute-node: node$k sees /opt/slurm/lib/slurm/ddp.so and /opt/slurm-ddp/bin/ddp-train" "$out" "node$k"
done

# A node without libhwloc.so.15: in a mount namespace of this run alone, the library directory is seen through an
# overlay in which the library is removed (the dynamic loader then finds no such file, as on a node that lacks it).
dir=$(dirname "$(readlink -f "$(ldd /opt/slurm/lib/slurm/ddp.so | awk '/libhwloc/ {print $3}')")")
[ -d "$dir" ] || fail "ddp.so does not load hwloc: $(ldd /opt/slurm/lib/slurm/ddp.so)"
# shellcheck disable=SC2016  # a script for sh -c, expanded there
without_hwloc='t=$(mktemp -d) && mount -t tmpfs none "$t" && mkdir "$t/u" "$t/w" "$t/m" &&
  mount -t overlay none -o "lowerdir=$1,upperdir=$t/u,workdir=$t/w" "$t/m" && rm -f "$t/m"/libhwloc.so* &&
  mount --bind "$t/m" "$1" && if [ -n "$3" ]; then mount --bind "$3" /etc/os-release; fi && exec "$2"'
assert_fails "a node without libhwloc" on_node node2 unshare --mount --propagation private sh -c "$without_hwloc" sh "$dir" "$ACTION" ""
assert_contains "$FAILED_OUTPUT" "install-compute-node: /opt/slurm/lib/slurm/ddp.so cannot load on node2: libhwloc.so.15 not found: apt-get install -y libhwloc15" \
  "the missing library and this system's package"
assert_contains "$FAILED_OUTPUT" "this node cannot run slurm-ddp; install what is named above and run this again" "the verdict"
echo "refused, a node without hwloc: $(head -n 1 <<<"$FAILED_OUTPUT")"
# The same on Amazon Linux 2023 and RHEL 9 names their package (the os-release lines of each).
for system in 'ID=amzn VERSION_ID=2023 ID_LIKE=fedora|dnf install -y hwloc-libs' 'ID=rhel VERSION_ID=9.4 ID_LIKE=fedora|dnf install -y hwloc-libs'; do
  # shellcheck disable=SC2086  # one line per word
  printf '%s\n' ${system%%|*} >"$TEST_DIR/os-release"
  assert_fails "a node without libhwloc (${system%%|*})" on_node node2 unshare --mount --propagation private sh -c \
    "$without_hwloc" sh "$dir" "$ACTION" "$TEST_DIR/os-release"
  assert_contains "$FAILED_OUTPUT" "libhwloc.so.15 not found: ${system#*|}" "the package on ${system%%|*}"
done
out=$(on_node node2 "$ACTION" 2>&1) || fail "node2 with its library again: $out"
pass "every node sees ddp.so and ddp-train; a node without hwloc is named with the package of its system"
