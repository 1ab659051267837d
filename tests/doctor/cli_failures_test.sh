#!/usr/bin/env bash
# What the doctor must catch, each as a FAIL with the reason and a non-zero exit, within bounded time:
# an unreachable master port (from the rank that cannot reach it, and from rank 0 waiting for it), and a snapshot
# directory that is not the same on every node.
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"

# --- rank 1 cannot reach rank 0: nothing listens on MASTER_PORT ---------------------------------------------
WORLD=2
PORT=$(free_port)
start=$(date +%s)
start_rank lonely1 1 0 -- --quick --timeout 2
wait_ranks 20
[ "$(rc_of lonely1)" -eq 1 ] || fail "unreachable master: rank 1 exited $(rc_of lonely1)"
grep -E "^[^ ]+ +1 +net.master_port +FAIL +unreachable .*cannot reach rank 0 at 127.0.0.1:$PORT within 2 s: connection refused" \
  "$WORK/lonely1.out" >/dev/null || fail "rank 1's report lacks the reason: $(cat "$WORK/lonely1.out")"
grep -q "storage.dir\|cpu.cores" "$WORK/lonely1.out" || fail "rank 1 should still report its own checks"
echo "unreachable master port, seen from rank 1: OK ($(( $(date +%s) - start ))s)"

# --- rank 0 waits for a rank that never comes ---------------------------------------------------------------
PORT=$(free_port)
start=$(date +%s)
start_rank waiting0 0 0 -- --quick --json --timeout 2
wait_ranks 20
[ "$(rc_of waiting0)" -eq 1 ] || fail "missing rank: rank 0 exited $(rc_of waiting0)"
check_report "$WORK/waiting0.out" "
missing = row('net.master_port', 1)
assert missing['status'] == 'FAIL' and missing['value'] == 'never connected', missing
assert 'rank 1 did not reach rank 0 at 127.0.0.1:$PORT' in missing['detail'], missing
assert row('net.master_port', 0)['detail'] == '1 of 2 ranks joined'
assert report['ok'] is False
"
echo "unreachable master port, seen from rank 0: OK ($(( $(date +%s) - start ))s)"

# --- every rank has its own snapshot directory: not shared ----------------------------------------------------
PORT=$(free_port)
mkdir -p "$WORK/node-a" "$WORK/node-b"
start_rank private0 0 0 -- --quick --json --timeout 20 --snapshot-dir "$WORK/node-a"
start_rank private1 1 0 -- --quick --json --timeout 20 --snapshot-dir "$WORK/node-b"
wait_ranks 60
[ "$(rc_of private0)" -eq 1 ] && [ "$(rc_of private1)" -eq 1 ] \
  || fail "private directories: exits $(rc_of private0) $(rc_of private1), expected 1 1"
check_report "$WORK/private0.out" "
for rank, other in ((0, 1), (1, 0)):
    shared = row('storage.shared', rank)
    assert shared['status'] == 'FAIL', shared
    assert f'files written by rank {other} (' in shared['detail'], shared
    assert 'not the same directory on every node' in shared['detail'], shared
    assert row('storage.dir', rank)['status'] == 'OK'
assert [r['check'] for r in report['results'] if r['status'] == 'FAIL'] == ['storage.shared'] * 2
"
[ -z "$(ls -A "$WORK/node-a" "$WORK/node-b" | grep -v '^$\|:$' || true)" ] || fail "tokens were left behind"
echo "node-private snapshot directories: OK"
