#!/usr/bin/env bash
# The head-node install script against Debian's Slurm layout, with a scratch plugin directory and plugstack:
# it installs, srun loads the plugin, a second run changes nothing, and a version mismatch is refused; the
# compute-node script checks what it installed.
set -euo pipefail
SCRIPT=$(cd "$(dirname "$0")/../.." && pwd)/sbatch_templates/parallelcluster/install-head-node.sh
WORK=$(mktemp -d /tmp/ddp-install-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

write_conf() {  # $1: directory of a scratch slurm.conf whose PlugStackConfig is $1/plugstack.conf
  mkdir -p "$1/plugins"
  cat >"$1/slurm.conf" <<CONF
ClusterName=installtest
SlurmctldHost=localhost
PlugStackConfig=$1/plugstack.conf
NodeName=n1 CPUs=1
PartitionName=p Nodes=n1
CONF
}

install_into() {  # $1: scratch dir; rest: plugstack arguments
  local dir=$1; shift
  "$SCRIPT" --slurm-prefix /usr --slurm-conf "$dir/slurm.conf" --plugin-dir "$dir/plugins" --build-dir "$WORK/build" "$@"
}

# 1. A plugstack.conf with an include directory (Debian's and ParallelCluster's layout).
write_conf "$WORK/a"
echo "include $WORK/a/plugstack.conf.d/*.conf" >"$WORK/a/plugstack.conf"
install_into "$WORK/a" port_range=21000-21999 >"$WORK/first.log"
[ -x "$WORK/a/plugins/ddp.so" ] || fail "ddp.so not installed"
[ "$(cat "$WORK/a/plugstack.conf.d/zz-ddp.conf")" = "required $WORK/a/plugins/ddp.so port_range=21000-21999" ] ||
  fail "unexpected snippet: $(cat "$WORK/a/plugstack.conf.d/zz-ddp.conf")"
help=$(SLURM_CONF=$WORK/a/slurm.conf srun --help)
grep -q -- '--ddp-port' <<<"$help" || fail "srun does not list --ddp-port"

# 2. Idempotent: the second run writes nothing.
before=$(stat -c '%Y %i' "$WORK/a/plugins/ddp.so" "$WORK/a/plugstack.conf.d/zz-ddp.conf")
install_into "$WORK/a" port_range=21000-21999 >"$WORK/second.log"
grep -E 'wrote|installed' "$WORK/second.log" && fail "second run changed files"
[ "$before" = "$(stat -c '%Y %i' "$WORK/a/plugins/ddp.so" "$WORK/a/plugstack.conf.d/zz-ddp.conf")" ] || fail "files touched"

# 2b. An earlier install's ddp.conf (which sorts before pyxis.conf) goes; a pyxis snippet sorting after ours is named.
echo "required $WORK/a/plugins/ddp.so" >"$WORK/a/plugstack.conf.d/ddp.conf"
echo "optional $WORK/a/plugins/spank_pyxis.so" >"$WORK/a/plugstack.conf.d/zzz-pyxis.conf"
install_into "$WORK/a" port_range=21000-21999 >"$WORK/upgrade.log"
[ ! -e "$WORK/a/plugstack.conf.d/ddp.conf" ] || fail "the old ddp.conf was left beside zz-ddp.conf"
grep -q "warning: $WORK/a/plugstack.conf.d/zzz-pyxis.conf loads pyxis after zz-ddp.conf" "$WORK/upgrade.log" ||
  fail "a pyxis snippet after zz-ddp.conf was not named: $(cat "$WORK/upgrade.log")"
rm "$WORK/a/plugstack.conf.d/zzz-pyxis.conf"

# 3. No include line: exactly one ddp.so line in plugstack.conf, updated in place.
write_conf "$WORK/b"
echo "# site plugins: keep this line" >"$WORK/b/plugstack.conf"
install_into "$WORK/b" >/dev/null
install_into "$WORK/b" default_backend=gloo >/dev/null
[ "$(grep -c 'ddp\.so' "$WORK/b/plugstack.conf")" = 1 ] || fail "not exactly one ddp.so line: $(cat "$WORK/b/plugstack.conf")"
grep -q "^required $WORK/b/plugins/ddp.so default_backend=gloo$" "$WORK/b/plugstack.conf" || fail "line not updated"
grep -q "^# site plugins: keep this line$" "$WORK/b/plugstack.conf" || fail "other plugstack lines lost"
install_into "$WORK/b" --optional >/dev/null
grep -q "^optional $WORK/b/plugins/ddp.so$" "$WORK/b/plugstack.conf" || fail "--optional: $(cat "$WORK/b/plugstack.conf")"

# 4. Headers of another Slurm version than the srun found: refused, with both versions named.
headers=$(sed -n -E 's/^#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]+).*/\1/p' /usr/include/slurm/slurm_version.h)
headers=$(printf '%d.%02d.%d' $((16#$headers >> 16 & 255)) $((16#$headers >> 8 & 255)) $((16#$headers & 255)))
mkdir -p "$WORK/fake/bin"
ln -s /usr/include "$WORK/fake/include"
printf '#!/bin/sh\necho "slurm 21.08.9"\n' >"$WORK/fake/bin/srun" && chmod +x "$WORK/fake/bin/srun"
if "$SCRIPT" --slurm-prefix "$WORK/fake" --slurm-conf "$WORK/a/slurm.conf" >"$WORK/mismatch.log" 2>&1; then
  fail "version mismatch accepted"
fi
grep -qF "are $headers but $WORK/fake/bin/srun is 21.08.9" "$WORK/mismatch.log" ||
  fail "unclear mismatch message: $(cat "$WORK/mismatch.log")"
# 5. The compute-node check (ParallelCluster's OnNodeConfigured) sees the installed plugin, and fails a node without it.
COMPUTE=$(dirname "$SCRIPT")/install-compute-node.sh
"$COMPUTE" --plugin-dir "$WORK/a/plugins" >"$WORK/compute.log" 2>&1 || fail "compute node check failed: $(cat "$WORK/compute.log")"
grep -q "sees $WORK/a/plugins/ddp.so" "$WORK/compute.log" || fail "compute node check: $(cat "$WORK/compute.log")"
mkdir -p "$WORK/empty"
if "$COMPUTE" --plugin-dir "$WORK/empty" >"$WORK/compute-empty.log" 2>&1; then fail "a node without ddp.so passed"; fi
grep -q "no ddp.so in $WORK/empty: run install-head-node.sh on the head node first" "$WORK/compute-empty.log" ||
  fail "unclear message for a node without ddp.so: $(cat "$WORK/compute-empty.log")"

# 6. A changed plugin over a live one (a PluginDir on shared storage, mapped by running steps on other nodes): never
# written in place, and the old inode keeps a name, so that NFS does not remove it under a process that maps it.
live=$WORK/a/plugins/ddp.so
before_inode=$(stat -c %i "$live")
before_sum=$(sha256sum <"$live")
printf 'a changed build' >>"$WORK/build/ddp.so"  # trailing bytes: still a loadable plugin
install_into "$WORK/a" port_range=21000-21999 >"$WORK/third.log"
grep -q "installed: $live (the previous one stays as $live\.[0-9a-f]\{16\}" "$WORK/third.log" ||
  fail "reinstall: $(cat "$WORK/third.log")"
[ "$(stat -c %i "$live")" != "$before_inode" ] || fail "the live ddp.so was written in place"
kept=$(find "$WORK/a/plugins" -inum "$before_inode")
[ -n "$kept" ] || fail "the old ddp.so's inode lost its last name: a process on another node mapping it would get SIGBUS"
[ "$(sha256sum <"$kept")" = "$before_sum" ] || fail "the old ddp.so was changed"
[ -z "$(find "$WORK/a/plugins" -name '.ddp.so.*')" ] || fail "a temporary file was left: $(ls -A "$WORK/a/plugins")"
grep -q -- '--ddp-port' <<<"$(SLURM_CONF=$WORK/a/slurm.conf srun --help)" || fail "srun does not load the new plugin"

# 7. ParallelCluster's head-node action: a tarball whose SHA-256 is not the one given is refused before anything is
# unpacked; a good one is unpacked as root's files whatever owners the archive records, checked, then installed, and
# a second run of the same install does nothing. (tests/pcluster runs the real one on a ParallelCluster-like head node.)
PCLUSTER=$(dirname "$SCRIPT")/pcluster-head-node.sh
mkdir -p "$WORK/src/slurm-ddp/sbatch_templates/parallelcluster" "$WORK/opt" "$WORK/prefix/bin" "$WORK/prefix/plugins"
cp "$(dirname "$SCRIPT")/install_lib.sh" "$WORK/src/slurm-ddp/sbatch_templates/parallelcluster/"
# A stand-in for install-head-node.sh: its check says where the plugin goes; its install records how it ran.
printf '#!/bin/sh
case " $* " in *" --check "*) echo "install-head-node: ready to build against Slurm 25.11.6 at %s/prefix: ddp.so into %s/prefix/plugins, plugstack /x"; exit 0 ;; esac
echo "install-head-node $*" >>"%s/installed"
echo plugin >%s/prefix/plugins/ddp.so
' "$WORK" "$WORK" "$WORK" "$WORK" \
  >"$WORK/src/slurm-ddp/sbatch_templates/parallelcluster/install-head-node.sh"
printf '#!/bin/sh\ncase $1 in --version) echo "slurm 25.11.6" ;; --help) echo "  --ddp-verbose" ;; esac\n' >"$WORK/prefix/bin/srun"
chmod 0775 "$WORK/src/slurm-ddp/sbatch_templates/parallelcluster/install-head-node.sh" "$WORK/prefix/bin/srun"
tar -czf "$WORK/slurm-ddp.tar.gz" -C "$WORK/src" --owner=4242 --group=4242 slurm-ddp
good=$(sha256sum "$WORK/slurm-ddp.tar.gz" | cut -d' ' -f1)
pcluster() { env DDP_PCLUSTER_DEST="$WORK/opt/slurm-ddp" DDP_PCLUSTER_SLURM_PREFIX="$WORK/prefix" "$PCLUSTER" "$@"; }
if pcluster "$WORK/slurm-ddp.tar.gz" "$(printf '%064d' 0)" port_range=1-2 >"$WORK/bad-sum.log" 2>&1; then
  fail "a tarball with another checksum was installed"
fi
grep -q "does not have SHA-256 0\{64\} (it is $good); nothing was installed" "$WORK/bad-sum.log" ||
  fail "unclear checksum refusal: $(cat "$WORK/bad-sum.log")"
if [ -e "$WORK/opt/slurm-ddp" ] || [ -e "$WORK/installed" ]; then fail "something was unpacked or installed"; fi
if pcluster "$WORK/slurm-ddp.tar.gz" >/dev/null 2>&1; then fail "a tarball without a checksum was installed"; fi
pcluster "$WORK/slurm-ddp.tar.gz" "$good" port_range=20000-29999 >"$WORK/pcluster.log" 2>&1 ||
  fail "pcluster-head-node.sh: $(cat "$WORK/pcluster.log")"
[ "$(cat "$WORK/installed")" = "install-head-node --require-include --slurm-prefix $WORK/prefix --build-dir $(sed -n 's/.*--build-dir \([^ ]*\) .*/\1/p' "$WORK/installed") --tools-dir $WORK/opt/slurm-ddp/bin port_range=20000-29999" ] ||
  fail "install-head-node.sh ran as: $(cat "$WORK/installed")"
grep -q "ddp-train left out: no --ddp-train-python given" "$WORK/pcluster.log" || fail "ddp-train's absence not said: $(cat "$WORK/pcluster.log")"
owners=$(find "$WORK/opt/slurm-ddp/source" -printf '%u:%g\n' | sort -u)
[ "$owners" = "root:root" ] || fail "unpacked files keep the archive's owners: $owners"
[ -z "$(find "$WORK/opt/slurm-ddp/source" -perm /022)" ] || fail "unpacked files others may write: $(find "$WORK/opt/slurm-ddp/source" -perm /022)"
pcluster "$WORK/slurm-ddp.tar.gz" "$good" port_range=20000-29999 >"$WORK/pcluster-again.log" 2>&1 ||
  fail "pcluster-head-node.sh, second run: $(cat "$WORK/pcluster-again.log")"
grep -q "unchanged: this tarball is installed as given" "$WORK/pcluster-again.log" || fail "second run: $(cat "$WORK/pcluster-again.log")"
[ "$(wc -l <"$WORK/installed")" = 1 ] || fail "the second run installed again: $(cat "$WORK/installed")"
echo "install_test: OK"
