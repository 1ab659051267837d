# Helpers for the container tests (containers.sh, container_env.sh). Source after lib.sh:
#
#   out=$(view_tasks -- ch-run "$DDP_CLUSTER_IMAGE" --)
#   assert_eq 4/4 "$(tasks_right "$out")" "contract in ch-run"
#
# view_tasks runs print_task_view.sh on 2 nodes x 2 tasks under srun --ddp --ddp-verbose; tasks_right counts the
# tasks that saw every contract value ddp.so's --ddp-verbose line for their rank says it set, on the CPUs it names.
# figure LABEL TEXT prints a line the test's log keeps ("FIGURE LABEL: TEXT").
# shellcheck shell=bash

VIEW=$(stage "$(dirname "${BASH_SOURCE[0]}")/print_task_view.sh")
SRUN=(srun)
# What every rank must see as ddp.so set it, and ddp.so's own report file (not a contract value, but one that a
# container must not replace either).
CONTRACT_NAMES=(RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT TORCHELASTIC_ERROR_FILE)

# field LINE NAME: the value of the first NAME=value in LINE, without the verbose line's "[user]" mark; "-" when
# LINE has none (print_task_view.sh's word for unset).
field() {
  awk -v n="$2=" '{for (i = 1; i <= NF; i++) if (index($i, n) == 1) {v = substr($i, length(n) + 1); sub(/\[user\]$/, "", v); print v; exit}} END {if (v == "") print "-"}' <<<"$1"
}

# expand_cpus LIST: "0-2,5" -> "0,1,2,5".
expand_cpus() {
  tr ',' '\n' <<<"$1" | awk -F- 'NF == 2 {for (c = $1; c <= $2; c++) print c; next} NF == 1 && $1 != "" {print $1}' |
    sort -n | paste -sd, -
}

# tasks_right OUT [contract]: with "contract", the contract's values only, not the CPUs.
tasks_right() {
  local out=$1 what=${2:-all} right=0 total=0 line rank verbose name ok
  while IFS= read -r line; do
    total=$((total + 1))
    rank=$(field "$line" RANK)
    verbose=$(grep "^ddp: rank $rank on " <<<"$out" | head -n 1 || true)
    ok=1
    [ -n "$verbose" ] || ok=0
    for name in "${CONTRACT_NAMES[@]}"; do
      [ "$(field "$line" "$name")" = "$(field "${verbose%% | *}" "$name")" ] || ok=0
    done
    [ "$what" = contract ] || [ "$(expand_cpus "$(field "$line" cpus)")" = "$(expand_cpus "$(field "${verbose#* | }" cpus)")" ] || ok=0
    right=$((right + ok))
  done < <(grep '^task ' <<<"$out" || true)
  echo "$right/$total"
}

# view_tasks [SRUN OPTION...] -- [PREFIX...]: stdout and stderr together (in the allocation when there is one).
view_tasks() {
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  run_on_cluster timeout 120 "${SRUN[@]}" --ddp --ddp-verbose -N2 --ntasks-per-node=2 "${opts[@]}" "$@" "$VIEW" 2>&1
}

figure() { echo "FIGURE $1: $2"; }

# allocate: one allocation of 2 nodes x 2 tasks for every step of the test (SRUN: srun in it); a new job per srun
# would wait for the last one's nodes to be given back, a second or two each time.
allocate() {
  local out
  out=$(run_on_cluster salloc --no-shell -N2 --ntasks-per-node=2 2>&1) || fail "salloc: $out"
  JOB=$(grep -oE 'Granted job allocation [0-9]+' <<<"$out" | awk '{print $4}')
  [ -n "$JOB" ] || fail "no job id from salloc: $out"
  on_exit "run_on_cluster_as_root scancel $JOB"
  SRUN=(srun --jobid="$JOB")
}

# userns_works: the job user may make a user namespace on a node (ch-run, rootless runc and the stand-in need it);
# USERNS_ERROR says why not.
# shellcheck disable=SC2034  # read by the tests that source this file
userns_works() { USERNS_ERROR=$(on_node node1 --user unshare --user true 2>&1); }
