#!/usr/bin/env bash
# Bad input: one line naming the value and the fix, exit status 2, nothing else started.
set -euo pipefail
DOCTOR=$1
. "$(dirname "$0")/lib.sh"

expect_usage_error() {
  local expected=$1
  shift
  local rc=0
  env "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "$*: expected one line on stderr, got: $(cat "$WORK/err")"
  grep -qF -- "$expected" "$WORK/err" || fail "$*: expected '$expected', got: $(cat "$WORK/err")"
  [ ! -s "$WORK/out" ] || fail "$*: printed a report for bad input"
}

expect_usage_error "ddp-doctor: --workers 'many' is not a whole number from 0 to 4096; e.g. --workers 8" \
  "$DOCTOR" --workers many
expect_usage_error "ddp-doctor: unknown option '--frobnicate'; run ddp-doctor --help" "$DOCTOR" --frobnicate
expect_usage_error "ddp-doctor: RANK '5' is not below WORLD_SIZE 2" RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=29999 "$DOCTOR"
expect_usage_error "ddp-doctor: MASTER_PORT 'http' is not a whole number from 1 to 65535" RANK=0 WORLD_SIZE=2 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=http "$DOCTOR"
expect_usage_error "ddp-doctor: --snapshot-size '10 GB' is not a size" "$DOCTOR" --snapshot-size "10 GB"
# What srun --ddp set (DDP_CONTRACT) replaced after it, as pyxis with enroot's pytorch hook does in the wrong plugin
# order: named; the same port given with --master-port is the user's own choice and is used.
contract="RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999"
expect_usage_error "ddp-doctor: MASTER_PORT=61003 in this program, but srun --ddp set MASTER_PORT=29999" \
  DDP_CONTRACT="$contract" RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=61003 "$DOCTOR" --quick
rc=0
env DDP_CONTRACT="$contract" RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=61003 "$DOCTOR" --quick --json \
  --master-port "$(free_port)" --snapshot-dir "$WORK" >"$WORK/out" 2>"$WORK/err" || rc=$?
[ "$rc" -ne 2 ] || fail "--master-port under a contract was refused: $(cat "$WORK/err")"
grep -q '"check":"container.runtime"' "$WORK/out" || fail "no container.runtime row: $(head -c 600 "$WORK/out")"

"$DOCTOR" --help >"$WORK/help"
grep -q "^usage: srun --ddp" "$WORK/help" || fail "--help does not start with the usage"
grep -q -- "--snapshot-dir DIR" "$WORK/help" || fail "--help does not list --snapshot-dir"
grep -q -- "--list-checks" "$WORK/help" || fail "--help does not list --list-checks"

# The catalogue of checks: docs/doctor-checks.md holds the table --list-checks prints.
"$DOCTOR" --list-checks >"$WORK/checks"
sed -n '/^```text$/,/^```$/p' "$(dirname "$0")/../../docs/doctor-checks.md" | sed '1d;$d' >"$WORK/documented"
diff -u "$WORK/documented" "$WORK/checks" >&2 ||
  fail "docs/doctor-checks.md differs from ddp-doctor --list-checks: paste the new table into it"
echo "usage errors: OK"
