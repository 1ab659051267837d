#!/usr/bin/env bash
# The Debian package of the plugin, built by CPack from the build tree ($1): right files, a conffile for the
# plugstack snippet, a dependency on the Slurm series it was built for, and a plugin that srun loads.
set -euo pipefail
BUILD=${1:?usage: package_test.sh BUILD_DIR}
WORK=$(mktemp -d /tmp/ddp-package-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$WORK" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" >cpack.log 2>&1) || fail "cpack: $(tail -5 "$WORK/cpack.log")"
deb=$(ls "$WORK"/slurm-ddp-plugin_*.deb)
plugin_dir=$(dirname "$(find /usr/lib -name auth_munge.so -path '*slurm*' | head -n 1)")

# Listings are captured first: grep -q closing a pipe early would fail the pipeline under pipefail.
contents=$(dpkg-deb -c "$deb")
info=$(dpkg-deb -I "$deb")
grep -q " \.$plugin_dir/ddp\.so$" <<<"$contents" || fail "ddp.so is not in $plugin_dir: $contents"
# zz-ddp.conf: Slurm reads plugstack.conf.d in sorted order, and ddp.so comes after pyxis (pyxis.conf).
grep -q ' \./etc/slurm/plugstack\.conf\.d/zz-ddp\.conf$' <<<"$contents" || fail "no plugstack snippet"
# The series of the headers it was built against, and the next one (22.05 and 22.06; 24.11 and 24.12).
number=$(sed -n -E 's/^#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]+).*/\1/p' /usr/include/slurm/slurm_version.h)
series=$(printf '%d.%02d' $((16#$number >> 16 & 255)) $((16#$number >> 8 & 255)))
next=$(printf '%d.%02d' $((16#$number >> 16 & 255)) $(((16#$number >> 8 & 255) + 1)))
grep -qF "Depends: slurm-wlm-basic-plugins (>= $series), slurm-wlm-basic-plugins (<< $next)" <<<"$info" ||
  fail "no dependency on the Slurm series $series: $(grep Depends <<<"$info")"
grep -q ' \./usr/share/doc/slurm-ddp-plugin/copyright$' <<<"$contents" || fail "no copyright file (LICENSE)"
dpkg-deb -e "$deb" "$WORK/control"
[ "$(cat "$WORK/control/conffiles")" = "/etc/slurm/plugstack.conf.d/zz-ddp.conf" ] || fail "snippet is not a conffile"
# An earlier package's ddp.conf is moved to the new name on upgrade, by every maintainer script.
for script in preinst postinst postrm; do
  grep -q "^dpkg-maintscript-helper mv_conffile /etc/slurm/plugstack.conf.d/ddp.conf /etc/slurm/plugstack.conf.d/zz-ddp.conf " \
    "$WORK/control/$script" || fail "$script does not move the old ddp.conf: $(cat "$WORK/control/$script" 2>&1)"
  [ -x "$WORK/control/$script" ] || fail "$script is not executable"
done

# The packaged plugin and snippet, unpacked into a scratch root, load in srun.
dpkg-deb -x "$deb" "$WORK/root"
grep -q "^required $plugin_dir/ddp.so$" "$WORK/root/etc/slurm/plugstack.conf.d/zz-ddp.conf" || fail "snippet line"
sed "s|$plugin_dir|$WORK/root$plugin_dir|" "$WORK/root/etc/slurm/plugstack.conf.d/zz-ddp.conf" >"$WORK/plugstack.conf"
printf 'ClusterName=pkg\nSlurmctldHost=localhost\nPlugStackConfig=%s\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n' \
  "$WORK/plugstack.conf" >"$WORK/slurm.conf"
help=$(SLURM_CONF=$WORK/slurm.conf srun --help)
grep -q -- '--ddp-snapshot-dir' <<<"$help" || fail "srun does not load the packaged plugin"

# `apt remove` keeps the snippet (a conffile) and removes ddp.so: its "required" line would stop every step on the
# node. The maintainer scripts, run as dpkg runs them (DPKG_ROOT for a root elsewhere), set it aside and back.
snippet=$WORK/root/etc/slurm/plugstack.conf.d/zz-ddp.conf
export DPKG_MAINTSCRIPT_PACKAGE=slurm-ddp-plugin  # what dpkg-maintscript-helper needs from dpkg
sed -i "s|$plugin_dir|$WORK/root$plugin_dir|" "$snippet"
printf 'include %s/*.conf\n' "$(dirname "$snippet")" >"$WORK/plugstack.conf"
SLURM_CONF=$WORK/slurm.conf srun --help | grep -q -- '--ddp-snapshot-dir' || fail "srun does not load the included snippet"
rm "$WORK/root$plugin_dir/ddp.so"
for script in postinst postrm; do [ -x "$WORK/control/$script" ] || fail "the package has no $script"; done
DPKG_ROOT=$WORK/root DPKG_MAINTSCRIPT_NAME=postrm "$WORK/control/postrm" remove
SLURM_CONF=$WORK/slurm.conf srun --help >"$WORK/after-remove.log" 2>&1 ||
  fail "after apt remove, srun fails: $(cat "$WORK/after-remove.log")"
[ -e "$snippet.removed" ] || fail "the snippet was not kept aside"
DPKG_ROOT=$WORK/root DPKG_MAINTSCRIPT_NAME=postinst "$WORK/control/postinst" configure
grep -q "^required $WORK/root$plugin_dir/ddp.so$" "$snippet" || fail "reinstall: the snippet did not come back as it was"
DPKG_ROOT=$WORK/root DPKG_MAINTSCRIPT_NAME=postrm "$WORK/control/postrm" remove
DPKG_ROOT=$WORK/root DPKG_MAINTSCRIPT_NAME=postrm "$WORK/control/postrm" purge
[ -z "$(ls -A "$WORK/root/etc/slurm/plugstack.conf.d")" ] || fail "purge left $(ls -A "$WORK/root/etc/slurm/plugstack.conf.d")"
# The tools package: the CLIs and ddp-restart on PATH, the templates as examples, a dependency on LibTorch.
tools=$(ls "$WORK"/slurm-ddp-tools_*.deb)
contents=$(dpkg-deb -c "$tools")
expected=(usr/bin/ddp-topo usr/bin/ddp-doctor usr/bin/ddp-restart usr/share/doc/slurm-ddp-tools/copyright
          usr/share/slurm-ddp/sbatch_templates/multi-node.sbatch usr/share/slurm-ddp/sbatch_templates/python-ddp.sbatch
          usr/share/slurm-ddp/sbatch_templates/parallelcluster/install-head-node.sh)
[ -e "$BUILD/runtime/ddp-train" ] && expected+=(usr/bin/ddp-train)
for path in "${expected[@]}"; do
  grep -q " \./$path$" <<<"$contents" || fail "slurm-ddp-tools lacks /$path: $contents"
done
grep -q '^-rwxr-xr-x .* \./usr/bin/ddp-restart$' <<<"$contents" || fail "ddp-restart is not executable"
if [ -e "$BUILD/runtime/ddp-train" ]; then
  grep -q '^ Depends: .*libtorch' <<<"$(dpkg-deb -I "$tools")" || fail "slurm-ddp-tools does not depend on LibTorch"
fi
echo "package_test: OK"
