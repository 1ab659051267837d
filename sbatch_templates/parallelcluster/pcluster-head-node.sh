#!/usr/bin/env bash
# ParallelCluster OnNodeConfigured action for the head node: fetch the slurm-ddp source tarball given as the
# first argument (s3://... or a local path), check it against the SHA-256 given as the second (sha256sum of the
# tarball you uploaded), unpack it to /opt/slurm-ddp, and install the plugin into the cluster's Slurm under
# /opt/slurm. The remaining arguments are the plugin's admin defaults (KEY=VALUE).
#
# This runs as root and builds a plugin that runs as root on every node: the tarball is used only when its checksum
# is the one given, and its files become root's whatever owners the archive records (tar keeps them for root by
# default), in a fresh directory that replaces /opt/slurm-ddp whole.
# DDP_PCLUSTER_DEST and DDP_PCLUSTER_SLURM_PREFIX change /opt/slurm-ddp and /opt/slurm (tests).
set -euo pipefail
usage="usage: pcluster-head-node.sh s3://bucket/slurm-ddp.tar.gz SHA256 [KEY=VALUE ...]"
die() { echo "pcluster-head-node: $*" >&2; exit 1; }
source_tarball=${1:?$usage}
checksum=${2:-}
[[ $checksum =~ ^[0-9a-f]{64}$ ]] ||
  die "second argument '${checksum}': give the tarball's SHA-256 (sha256sum slurm-ddp.tar.gz) after its location; $usage"
shift 2
dest=${DDP_PCLUSTER_DEST:-/opt/slurm-ddp}
slurm_prefix=${DDP_PCLUSTER_SLURM_PREFIX:-/opt/slurm}
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
if [ -e "$dest" ]; then mv "$dest" "$work/previous"; fi
mv "$work/tree" "$dest"
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  if command -v apt-get >/dev/null; then apt-get install -y cmake g++ make; else yum install -y cmake3 gcc-c++ make; fi
fi
"$dest/sbatch_templates/parallelcluster/install-head-node.sh" --slurm-prefix "$slurm_prefix" "$@"
