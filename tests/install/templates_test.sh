#!/usr/bin/env bash
# Static checks of everything users and admins run from sbatch_templates/: valid bash, shellcheck-clean,
# an sbatch header with --ddp on every template, and a ParallelCluster config that is valid YAML.
# (The templates also run to completion on the test cluster: tests/cluster.)
set -euo pipefail
DIR=$(cd "$(dirname "$0")/../../sbatch_templates" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
mapfile -t scripts < <(find "$DIR" -type f \( -name '*.sbatch' -o -name '*.sh' -o -name 'ddp-restart' \) | sort)
[ "${#scripts[@]}" -ge 8 ] || fail "expected the templates and scripts, found: ${scripts[*]}"
for script in "${scripts[@]}"; do
  bash -n "$script" || fail "$script is not valid bash"
  shellcheck -x -P SCRIPTDIR "$script" || fail "$script has shellcheck findings"
done
for template in "$DIR"/*.sbatch "$DIR"/parallelcluster/*.sbatch; do
  grep -q '^#SBATCH --ddp' "$template" || fail "$template lacks #SBATCH --ddp"
  grep -q '^#SBATCH --signal=B:USR2@' "$template" || fail "$template lacks the USR2 warning signal"
  grep -q '^#SBATCH --requeue' "$template" || fail "$template is not requeueable"
  # GPUs come from the command line in either form: Slurm 26.05 refuses --gres=gpu beside --gpus-per-node.
  if grep -E '^#SBATCH +--(gpus|gres)' "$template"; then fail "$template asks for GPUs itself"; fi
  grep -q 'the job has no GPUs: submit it with --gpus-per-node=' "$template" || fail "$template runs on without GPUs"
done
/usr/bin/python3 -c 'import sys, yaml; yaml.safe_load(open(sys.argv[1]))' "$DIR/parallelcluster/cluster-config.yaml" ||
  fail "cluster-config.yaml is not valid YAML"
echo "templates_test: ${#scripts[@]} scripts OK"
