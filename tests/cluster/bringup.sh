#!/usr/bin/env bash
# The test cluster's bring-up says why it failed and does not fail for a slow start: a slurmctld that
# cannot start is reported with its exit status and the log line that says why, and leaves nothing behind; under a
# CPU load that slows every daemon, the cluster still comes up. Runs before cluster_up (its own bring-ups).
set -euo pipefail
CLUSTER=$(cd "$(dirname "$0")" && pwd)/cluster.sh
PLUGIN=${DDP_PLUGIN:-}
fail() { echo "FAIL bringup: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP bringup: needs root"; exit 77; }
load_pids=()
cleanup() {
  [ ${#load_pids[@]} -eq 0 ] || kill "${load_pids[@]}" 2>/dev/null || true
  "$CLUSTER" down >/dev/null 2>&1 || true
}
trap cleanup EXIT

up() { "$CLUSTER" up ${PLUGIN:+--plugin "$PLUGIN"}; }

# 1. slurmctld refuses its configuration: the reason, not a guess.
if out=$(DDP_CLUSTER_SLURM_CONF_EXTRA='NoSuchSlurmKey=1' up 2>&1); then fail "a bad slurm.conf came up: $out"; fi
grep -qE 'slurmctld \(pid [0-9]+\) exited with status [1-9]' <<<"$out" || fail "no exit status of slurmctld in: $out"
grep -q 'NoSuchSlurmKey' <<<"$out" || fail "the cause (the bad key) is not in: $out"
left=$(ip netns list | grep -c '^ddp-node' || true)
[ "$left" = 0 ] || fail "$left node namespaces left after a failed bring-up"
"$CLUSTER" pgrep -x slurmctld >/dev/null && fail "slurmctld left running"

# 2. The state directory another user made first (/tmp is everyone's), or a link: refused before anything is done
# there, so that nobody but root can change what the root-run test Slurm reads (its plugstack.conf, the plugin).
planted=$(mktemp -d /tmp/ddp-cluster-planted.XXXXXX)
chown 65534:65534 "$planted"
if out=$(DDP_CLUSTER_DIR=$planted "$CLUSTER" up ${PLUGIN:+--plugin "$PLUGIN"} 2>&1); then
  fail "a state directory of uid 65534 was used: $out"
fi
grep -q "$planted is owned by uid 65534, not root" <<<"$out" || fail "unclear refusal: $out"
[ "$(ls -A "$planted")$(stat -c %u "$planted")" = 65534 ] || fail "the planted directory was touched"
ln -s /etc "$planted.link"
if out=$(DDP_CLUSTER_DIR=$planted.link "$CLUSTER" up 2>&1); then fail "a link was used as the state directory: $out"; fi
grep -q "$planted.link is a symbolic link, not a directory" <<<"$out" || fail "unclear refusal of a link: $out"
rm -rf "$planted" "$planted.link"

# 3. Every core busy: the daemons start slowly, and the bring-up waits for them.
for _ in $(seq $(($(nproc) * 2))); do
  (while :; do :; done) &
  load_pids+=($!)
done
out=$(up 2>&1) || fail "the cluster did not come up under load: $out"
grep -q 'up: 2 nodes idle' <<<"$out" || fail "unexpected bring-up output: $out"
echo "PASS bringup: a bad slurm.conf named with slurmctld's exit status; up under load: ${out##*idle in }"
