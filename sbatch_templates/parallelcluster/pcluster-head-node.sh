#!/usr/bin/env bash
# ParallelCluster OnNodeConfigured action for the head node:
#
#   pcluster-head-node.sh TARBALL SHA256 [--ddp-train-python PY] [--optional] [KEY=VALUE ...]
#
# TARBALL is the slurm-ddp source (s3://... or a local path), used only when its SHA-256 is SHA256 (sha256sum of the
# tarball you uploaded). It installs ddp.so into the cluster's Slurm under /opt/slurm (install-head-node.sh, built
# with make and the AMI's compilers: nothing is downloaded or installed from a package manager), the tools ddp-why,
# ddp-topo and ddp-restart into /opt/slurm-ddp/bin, and, with --ddp-train-python PY, ddp-train built against PY's
# PyTorch (install-ddp-train.sh, which needs cmake). KEY=VALUE are the plugin's admin defaults (port_range=...,
# snapshot_dir=...); --optional writes an "optional" plugstack line.
#
# Layout: /opt/slurm-ddp/source (the unpacked tarball, replaced whole), /opt/slurm-ddp/bin (the programs, replaced
# file by file while jobs run them), /opt/slurm-ddp/.installed (what was installed from what: a second run with the
# same tarball, arguments and Slurm changes nothing and builds nothing). Compute nodes see /opt/slurm (NFS from the
# head node) and /opt/slurm-ddp when the cluster shares it (SharedStorage, docs/admin.md).
#
# Everything is checked before anything is built, and everything is built before anything is installed: a tarball
# whose checksum differs, a Slurm without headers or of another series than its srun, a plugstack.conf that includes
# no directory, missing compilers, a Python without torch or no cmake for ddp-train: one line each, with the fix,
# and nothing changed. This runs as root and builds a plugin that runs as root on every node: the tarball's files
# become root's, whatever owners the archive records.
# DDP_PCLUSTER_DEST and DDP_PCLUSTER_SLURM_PREFIX change /opt/slurm-ddp and /opt/slurm (tests).
set -euo pipefail
PROGRAM=pcluster-head-node
die() { echo "$PROGRAM: $*" >&2; exit 1; }
say() { echo "$PROGRAM: $*"; }
usage="usage: pcluster-head-node.sh s3://bucket/slurm-ddp.tar.gz SHA256 [--ddp-train-python PY] [--optional] [KEY=VALUE ...]"
source_tarball=${1:?$usage}
checksum=${2:-}
[[ $checksum =~ ^[0-9a-f]{64}$ ]] ||
  die "second argument '${checksum}': give the tarball's SHA-256 (sha256sum slurm-ddp.tar.gz) after its location; $usage"
shift 2
python="" plugin_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --ddp-train-python) python=${2:?--ddp-train-python needs the path of a Python with PyTorch}; shift 2 ;;
    --optional | *=*) plugin_args+=("$1"); shift ;;
    *) die "unknown argument '$1'; $usage" ;;
  esac
done
dest=${DDP_PCLUSTER_DEST:-/opt/slurm-ddp}
slurm_prefix=${DDP_PCLUSTER_SLURM_PREFIX:-/opt/slurm}
t0=$SECONDS

# A directory of our own (mktemp, mode 0700) beside the destination: a fixed /tmp name could be a link another user
# planted, and the unpacked tree moves into place with one rename.
work=$(mktemp -d "$(dirname "$dest")/.slurm-ddp.XXXXXX")
trap 'rm -rf "$work"' EXIT
case "$source_tarball" in
  s3://*)
    aws s3 cp "$source_tarball" "$work/slurm-ddp.tar.gz"
    source_tarball=$work/slurm-ddp.tar.gz
    ;;
esac
echo "$checksum  $source_tarball" | sha256sum --check --status ||
  die "$source_tarball does not have SHA-256 $checksum (it is $(sha256sum "$source_tarball" | cut -d' ' -f1)); nothing was installed"
mkdir "$work/tree"
tar -xzf "$source_tarball" -C "$work/tree" --strip-components=1 --no-same-owner --no-same-permissions
chown -R root:root "$work/tree"
chmod -R go-w "$work/tree"
scripts=$work/tree/sbatch_templates/parallelcluster

# ---- checks: nothing is built or written before all of them pass.
check=$("$scripts/install-head-node.sh" --check --require-include --slurm-prefix "$slurm_prefix" "${plugin_args[@]}") ||
  exit 1
echo "$check"
plugin_dir=$(sed -n 's/.*: ddp.so into \(.*\), plugstack .*/\1/p' <<<"$check")
torch_note=""
if [ -n "$python" ]; then
  "$scripts/install-ddp-train.sh" --check --python "$python" --prefix "$dest" || exit 1
  torch_note="torch $("$python" -c 'import torch; print(torch.__version__)')"
fi

# ---- a second run of the same install: nothing to do.
record() {
  printf 'tarball %s\nslurm %s\narguments %s\npython %s %s\n' "$checksum" "$("$slurm_prefix/bin/srun" --version)" \
    "${plugin_args[*]}" "${python:-none}" "$torch_note"
  local f
  for f in "$plugin_dir/ddp.so" "$dest/bin/ddp-why" "$dest/bin/ddp-topo" "$dest/bin/ddp-restart" \
    ${python:+"$dest/bin/ddp-train"}; do
    echo "file $f $(sha256sum <"$f" 2>/dev/null | cut -c1-64)"
  done
}
if [ -f "$dest/.installed" ] && [ "$(record)" = "$(cat "$dest/.installed")" ] && [ -d "$dest/source" ]; then
  "$slurm_prefix/bin/srun" --help 2>&1 | grep -q -- '--ddp-verbose' ||
    die "srun --help does not list --ddp although $dest/.installed says it is installed; remove $dest/.installed and run again"
  say "unchanged: this tarball is installed as given, and srun loads the plugin ($((SECONDS - t0)) s)"
  exit 0
fi

# ---- builds, then installs.
if [ -n "$python" ]; then
  "$scripts/install-ddp-train.sh" --python "$python" --prefix "$dest" --build-dir "$work/ddp-train-build"
fi
"$scripts/install-head-node.sh" --require-include --slurm-prefix "$slurm_prefix" --build-dir "$work/plugin-build" \
  --tools-dir "$dest/bin" "${plugin_args[@]}"
mkdir -p "$dest"
if [ -e "$dest/source" ]; then mv "$dest/source" "$work/previous"; fi
mv "$work/tree" "$dest/source"
record >"$dest/.installed"
if [ -z "$python" ]; then
  local_python=$(command -v python3 2>/dev/null || true)
  if [ -n "$local_python" ] && "$local_python" -c 'import torch' 2>/dev/null; then
    say "ddp-train left out: no --ddp-train-python given ($local_python has PyTorch); add it with: $dest/source/sbatch_templates/parallelcluster/install-ddp-train.sh --python $local_python"
  else
    say "ddp-train left out: no --ddp-train-python given and no python3 here has PyTorch; add it with: $dest/source/sbatch_templates/parallelcluster/install-ddp-train.sh --python /path/to/python (a pip or conda PyTorch on shared storage)"
  fi
fi
say "installed in $((SECONDS - t0)) s: ddp.so in $plugin_dir, programs in $dest/bin, source in $dest/source"
