# Shared by the ddp-doctor script tests: ranks as local processes on 127.0.0.1, and assertions on the report.
# Sourced; the caller sets DOCTOR (the binary) and uses `set -euo pipefail`.

# Variables a launcher may have left in this shell must not leak into the ranks.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT DDP_SNAPSHOT_DIR GLOO_SOCKET_IFNAME \
      NCCL_SOCKET_IFNAME TORCHELASTIC_RUN_ID OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK CUDA_VISIBLE_DEVICES

command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON report"; exit 77; }

WORK=$(mktemp -d /tmp/ddp-doctor-cli.XXXXXX)
cleanup_work() { rm -rf "$WORK"; }
trap cleanup_work EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A port nothing listens on, kept for this test until its shell ends (tests/common/test_common.hpp, reserve_port).
free_port() { "${DDP_TEST_PORT:?the test runs under ctest, which names ddp-test-port}" $$; }

# [CPUS=LIST] [CGROUP=DIR] start_rank NAME RANK LOCAL_RANK [VAR=VALUE...] -- [doctor options...]
# Starts one rank in the background, bound to the CPUs in LIST when it is given (taskset's list) and in the cgroup DIR
# when that is given; its stdout, stderr and exit status land in $WORK/NAME.{out,err,rc}.
start_rank() {
  local name=$1 rank=$2 local_rank=$3 bind=()
  shift 3
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  [ -z "${CPUS:-}" ] || bind=(taskset -c "$CPUS")
  # In the cgroup CGROUP (a directory) from its first instruction: the shell enters it, then becomes the doctor.
  # shellcheck disable=SC2016  # expanded by that shell
  [ -z "${CGROUP:-}" ] || bind=(sh -c 'echo $$ >"$0" && exec "$@"' "$CGROUP/cgroup.procs" "${bind[@]}")
  ( rc=0
    "${bind[@]}" env RANK="$rank" LOCAL_RANK="$local_rank" WORLD_SIZE="$WORLD" MASTER_ADDR=127.0.0.1 MASTER_PORT="$PORT" \
        OMP_NUM_THREADS=1 "${vars[@]}" "$DOCTOR" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    echo "$rc" >"$WORK/$name.rc" ) &
}

# Waits for every background rank, at most LIMIT seconds in all: nothing may hang.
wait_ranks() {
  local limit=$1 waited=0
  while [ -n "$(jobs -rp)" ]; do
    [ "$waited" -lt $((limit * 10)) ] || fail "ranks still running after ${limit}s: $(jobs -rp | tr '\n' ' ')"
    sleep 0.1
    waited=$((waited + 1))
  done
}

rc_of() { cat "$WORK/$1.rc"; }

# check_report FILE PYTHON: runs PYTHON with `report` (the parsed JSON) and helpers `rows(check, rank=ANY)` and
# `row(check, rank)` (exactly one), failing the test on an AssertionError. Every row's check must be one that
# `ddp-doctor --list-checks` lists.
check_report() {
  local catalogue
  catalogue=$("${DOCTOR:?}" --list-checks | awk 'NR > 1 { print $1 }')
  [ -n "$catalogue" ] || fail "ddp-doctor --list-checks listed no check"
  python3 - "$1" "$2" "$catalogue" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
unlisted = sorted({r["check"] for r in report["results"]} - set(sys.argv[3].split()))
if unlisted:
    sys.exit(f"checks reported but not in ddp-doctor --list-checks: {unlisted}")
ANY = object()
def rows(check, rank=ANY):
    return [r for r in report["results"] if r["check"] == check and (rank is ANY or r["rank"] == rank)]
def row(check, rank):
    found = rows(check, rank)
    assert len(found) == 1, f"{check} rank {rank}: {len(found)} rows"
    return found[0]
try:
    exec(sys.argv[2])
except AssertionError as e:
    print("report assertion failed:", e, file=sys.stderr)
    print(json.dumps(report, indent=1), file=sys.stderr)
    print("report assertion failed (the report is above):", e, file=sys.stderr)
    sys.exit(1)
PY
}
