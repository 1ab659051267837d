#!/usr/bin/env bash
# The RPM from packaging/slurm-ddp.spec, built with rpmbuild against this machine's Slurm headers (Debian's
# libslurm-dev stands in for slurm-devel: rpmbuild --nodeps, since dpkg's packages are not in rpm's database), then
# looked at as an admin would: its file list, scriptlets and requirements (printed), installed into a scratch root
# with rpm --root, its ddp.so loaded by this machine's srun, and its %post run against a private /etc/slurm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/ddp-rpm-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v rpmbuild >/dev/null || { echo "SKIP: no rpmbuild (apt-get install rpm)"; exit 77; }
[ -r /usr/include/slurm/slurm_version.h ] || { echo "SKIP: no Slurm headers (libslurm-dev)"; exit 77; }
SPEC=$ROOT/packaging/slurm-ddp.spec
VERSION=$(rpmspec -q --qf '%{version}' "$SPEC" 2>/dev/null)
SERIES=$(awk '/^#define SLURM_VERSION_NUMBER/ {print substr($3, 3)}' /usr/include/slurm/slurm_version.h)
SERIES=$(printf '%d.%02d' $((0x$SERIES >> 16 & 255)) $((0x$SERIES >> 8 & 255)))

# The source tarball, as the spec's comment makes it: this checkout's files.
mkdir -p "$WORK/rpmbuild/SOURCES"
(cd "$ROOT" && { git ls-files 2>/dev/null || find . -type f -not -path './build*' -printf '%P\n'; } |
  tar -czf "$WORK/rpmbuild/SOURCES/slurm-ddp-$VERSION.tar.gz" --transform "s,^,slurm-ddp-$VERSION/," -T -)
rpmbuild -bb --nodeps --define "_topdir $WORK/rpmbuild" "$SPEC" >"$WORK/rpmbuild.log" 2>&1 ||
  { tail -n 30 "$WORK/rpmbuild.log"; fail "rpmbuild failed"; }
rpm=$(find "$WORK/rpmbuild/RPMS" -name "slurm-ddp-$VERSION-*.rpm")
[ -n "$rpm" ] || fail "no RPM in $WORK/rpmbuild/RPMS"
echo "== $(basename "$rpm")"

files=$(rpm -qpl "$rpm")
echo "== files"; echo "$files"
expected="/etc/slurm/plugstack.conf.d
/etc/slurm/plugstack.conf.d/zz-ddp.conf
/usr/bin/ddp-restart
/usr/bin/ddp-topo
/usr/bin/ddp-why
/usr/lib64/slurm/ddp.so
/usr/share/doc/slurm-ddp/LICENSE"
[ "$files" = "$expected" ] || fail "file list: $files"
[ "$(rpm -qp --configfiles "$rpm")" = /etc/slurm/plugstack.conf.d/zz-ddp.conf ] || fail "the snippet is not a config file"
scripts=$(rpm -qp --scripts "$rpm")
echo "== scriptlets"; echo "$scripts"
grep -q '^postinstall scriptlet' <<<"$scripts" || fail "no %post: $scripts"
requires=$(rpm -qpR "$rpm")
echo "== requirements"; echo "$requires"
grep -qx "slurm >= $SERIES" <<<"$requires" || fail "no 'slurm >= $SERIES' requirement: $requires"
grep -qx "slurm < $(printf '%s' "$SERIES" | awk -F. '{printf "%d.%02d", $1, $2 + 1}')" <<<"$requires" || fail "no upper Slurm bound: $requires"
grep -qx "hwloc-libs" <<<"$requires" || fail "no hwloc-libs requirement: $requires"

# Into a scratch root: rpm's own database there, the files where the list says.
rpm --root "$WORK/root" --initdb
rpm --root "$WORK/root" -i --nodeps --noscripts "$rpm" || fail "rpm --root -i failed"
[ "$(rpm --root "$WORK/root" -q slurm-ddp)" = "$(basename "$rpm" .rpm)" ] || fail "rpm -q in the scratch root"
rpm --root "$WORK/root" -V --nodeps slurm-ddp || fail "rpm -V: the installed files differ from the package"
grep -qx "required /usr/lib64/slurm/ddp.so" "$WORK/root/etc/slurm/plugstack.conf.d/zz-ddp.conf" ||
  fail "the snippet: $(grep -v '^#' "$WORK/root/etc/slurm/plugstack.conf.d/zz-ddp.conf")"
# The package's ddp.so is one this machine's Slurm loads.
printf 'ClusterName=t\nSlurmctldHost=localhost\nPlugStackConfig=%s/plugstack.conf\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n' \
  "$WORK" >"$WORK/slurm.conf"
echo "required $WORK/root/usr/lib64/slurm/ddp.so" >"$WORK/plugstack.conf"
SLURM_CONF=$WORK/slurm.conf srun --help 2>&1 | grep -q -- '--ddp-verbose' || fail "srun does not load the RPM's ddp.so"

# %post, against a private /etc/slurm: it writes plugstack.conf with the include line where there is none, and says
# so where plugstack.conf includes no directory.
post=$(rpm -qp --qf '%{POSTIN}' "$rpm")
out=$(unshare --mount --propagation private sh -c 'mount -t tmpfs none /etc/slurm && sh -c "$1" && cat /etc/slurm/plugstack.conf' \
  sh "$post" 2>&1) || fail "%post: $out"
grep -qx "include /etc/slurm/plugstack.conf.d/\*" <<<"$out" || fail "%post without plugstack.conf: $out"
out=$(unshare --mount --propagation private sh -c 'mount -t tmpfs none /etc/slurm && echo "# site" >/etc/slurm/plugstack.conf && sh -c "$1"' \
  sh "$post" 2>&1) || fail "%post: $out"
grep -q "plugstack.conf does not include /etc/slurm/plugstack.conf.d/\*: add that line" <<<"$out" || fail "%post with a plugstack.conf of its own: $out"
echo "rpm_package_test: OK"
