#!/usr/bin/env bash
# storage.locks: a lock rank 0 holds on a file of the snapshot directory must be refused on every other node, or
# ddp-train cannot tell a dead writer's temporary from a live one there. Two ranks as two nodes: one directory
# (locks hold: OK), and one directory seen through two FUSE mounts that keep their locks to themselves, as NFS with
# local_lock=flock or Lustre with localflock do (bindfs without lock forwarding: WARN naming the mount options).
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"

# Both ranks on "their" node, with the snapshot directory each names; waits for both; the report of rank 0.
run_pair() {
  local name=$1 dir0=$2 dir1=$3
  PORT=$(free_port)
  start_rank "${name}0" 0 0 -- --quick --json --timeout 20 --snapshot-dir "$dir0"
  start_rank "${name}1" 1 0 -- --quick --json --timeout 20 --snapshot-dir "$dir1"
  wait_ranks 60
  [ "$(rc_of "${name}0")" -eq 0 ] && [ "$(rc_of "${name}1")" -eq 0 ] ||
    fail "$name: exits $(rc_of "${name}0") $(rc_of "${name}1"), expected 0 0: $(cat "$WORK/${name}0.err" "$WORK/${name}1.err")"
}

WORLD=2
mkdir -p "$WORK/shared"
run_pair shared "$WORK/shared" "$WORK/shared"
check_report "$WORK/shared0.out" "
locks = row('storage.locks', 1)
assert locks['status'] == 'OK' and locks['value'] == 'refused', locks
assert locks['threshold'] == 'refused while rank 0 (' + row('storage.shared', 0)['host'] + ') holds it', locks
assert rows('storage.locks', 0) == [], rows('storage.locks', 0)
assert row('storage.shared', 1)['status'] == 'OK'
"
[ -z "$(ls -A "$WORK/shared")" ] || fail "files were left behind: $(ls -A "$WORK/shared")"
echo "locks that hold across nodes: OK"

if [ "$(id -u)" -ne 0 ] || ! command -v bindfs >/dev/null || [ ! -c /dev/fuse ]; then
  echo "SKIP: node-local locks need root, bindfs and /dev/fuse"
  exit 77
fi
mkdir -p "$WORK/backing" "$WORK/node-a" "$WORK/node-b"
unmount_views() { fusermount -uz "$WORK/node-a" 2>/dev/null || true; fusermount -uz "$WORK/node-b" 2>/dev/null || true; }
trap 'unmount_views; cleanup_work' EXIT
# bindfs forwards no lock unless told to: each mount keeps its own, as a node-local lock manager does.
bindfs --no-allow-other "$WORK/backing" "$WORK/node-a"
bindfs --no-allow-other "$WORK/backing" "$WORK/node-b"
run_pair views "$WORK/node-a" "$WORK/node-b"
check_report "$WORK/views0.out" "
locks = row('storage.locks', 1)
assert locks['status'] == 'WARN' and locks['value'] == 'taken', locks
assert 'this node took the lock rank 0 (' in locks['detail'], locks
assert 'locks in the snapshot directory are node-local' in locks['detail'], locks
assert 'Mount the directory with local_lock=none (NFS) or flock (Lustre)' in locks['detail'], locks
assert row('storage.shared', 1)['status'] == 'OK' and row('storage.shared', 0)['status'] == 'OK'
assert report['ok'] is True, 'a WARN leaves the exit status 0'
"
[ -z "$(ls -A "$WORK/backing")" ] || fail "files were left behind: $(ls -A "$WORK/backing")"
echo "node-local locks: WARN naming the mount options: OK"
