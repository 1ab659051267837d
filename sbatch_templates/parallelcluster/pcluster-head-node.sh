#!/usr/bin/env bash
# ParallelCluster OnNodeConfigured action for the head node: fetch the slurm-ddp source tarball given as the
# first argument (s3://... or a local path), unpack it to /opt/slurm-ddp, and install the plugin into the
# cluster's Slurm under /opt/slurm. The remaining arguments are the plugin's admin defaults (KEY=VALUE).
set -euo pipefail
source_tarball=${1:?usage: pcluster-head-node.sh s3://bucket/slurm-ddp.tar.gz [KEY=VALUE ...]}
shift
dest=/opt/slurm-ddp
mkdir -p "$dest"
case "$source_tarball" in
  s3://*)
    # A directory of our own (mktemp, mode 0700): a fixed /tmp name could be a link another user planted.
    download=$(mktemp -d)
    trap 'rm -rf "$download"' EXIT
    aws s3 cp "$source_tarball" "$download/slurm-ddp.tar.gz"
    source_tarball=$download/slurm-ddp.tar.gz
    ;;
esac
tar -xzf "$source_tarball" -C "$dest" --strip-components=1
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  if command -v apt-get >/dev/null; then apt-get install -y cmake g++ make; else yum install -y cmake3 gcc-c++ make; fi
fi
"$dest/sbatch_templates/parallelcluster/install-head-node.sh" --slurm-prefix /opt/slurm "$@"
