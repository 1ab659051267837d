#!/usr/bin/env bash
# Installs the slurm-ddp SPANK plugin (ddp.so) on a Slurm head node, e.g. an AWS ParallelCluster head node,
# where Slurm lives under /opt/slurm and /opt/slurm is shared with every compute node.
#
#   sudo ./install-head-node.sh [options] [KEY=VALUE ...]
#
# KEY=VALUE pairs become the plugin's admin defaults on its plugstack line, e.g. port_range=20000-29999.
# Options:
#   --slurm-prefix DIR   Slurm's install prefix (default: /opt/slurm if it exists, else /usr)
#   --slurm-conf FILE    slurm.conf (default: $SLURM_CONF, else PREFIX/etc/slurm.conf, else /etc/slurm/slurm.conf)
#   --plugin-dir DIR     where ddp.so goes (default: PluginDir of slurm.conf, else the directory of auth_munge.so)
#   --plugstack FILE     the plugstack.conf to use (default: PlugStackConfig of slurm.conf, else beside slurm.conf)
#   --build-dir DIR      build directory (default: a fresh temporary directory)
#   --optional           plugstack line "optional" instead of "required". required: a node where ddp.so is missing
#                        or fails to load runs no job step at all (a broken node shows at once); use it when the
#                        plugin is part of every node's image. optional: such a node still runs steps without
#                        --ddp, and srun refuses --ddp where ddp.so is missing; use it while rolling out or
#                        upgrading, or when ddp.so sits on shared storage that a node may reach late.
# Running it twice changes nothing: files are only written when their content differs. It refuses to install
# a plugin built against headers of another Slurm version than the srun it finds.
# Order: ddp.so must come after pyxis in the plugin stack. pyxis's task_init imports its container's environment
# into every task over what is there (and enroot's pytorch hook puts MASTER_ADDR, MASTER_PORT and WORLD_SIZE
# into that environment); ddp.so after it sets the contract last, inside the container's view. Slurm reads an
# include directory in sorted order, so the snippet is plugstack.conf.d/zz-ddp.conf (after pyxis.conf), and a
# ddp.so line in plugstack.conf itself goes last. An order that would let pyxis win is refused by ddp.so at every
# step that asks for a container.
set -euo pipefail

SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
prefix="" slurm_conf="${SLURM_CONF:-}" plugin_dir="" plugstack="" build_dir="" mode=required args=()

die() { echo "install-head-node: $*" >&2; exit 1; }
say() { echo "install-head-node: $*"; }

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --slurm-prefix) prefix=${2:?--slurm-prefix needs a directory}; shift 2 ;;
      --slurm-conf) slurm_conf=${2:?--slurm-conf needs a file}; shift 2 ;;
      --plugin-dir) plugin_dir=${2:?--plugin-dir needs a directory}; shift 2 ;;
      --plugstack) plugstack=${2:?--plugstack needs a file}; shift 2 ;;
      --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
      --optional) mode=optional; shift ;;
      -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
      *=*) args+=("$1"); shift ;;
      *) die "unknown argument '$1'; see --help" ;;
    esac
  done
}

# Value of KEY in slurm.conf (case-insensitive key, as Slurm reads it), empty when absent.
conf_value() {
  [ -r "$slurm_conf" ] || return 0
  sed -n -E "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*([^[:space:]#]+).*/\\1/Ip" "$slurm_conf" | tail -n 1
}

locate_slurm() {
  if [ -z "$prefix" ]; then
    if [ -d /opt/slurm ]; then prefix=/opt/slurm; else prefix=/usr; fi
  fi
  [ -r "$prefix/include/slurm/spank.h" ] || die "no $prefix/include/slurm/spank.h: give the Slurm prefix with --slurm-prefix (Debian: install libslurm-dev)"
  [ -x "$prefix/bin/srun" ] || die "no $prefix/bin/srun: give the Slurm prefix with --slurm-prefix"
  if [ -z "$slurm_conf" ]; then
    for candidate in "$prefix/etc/slurm.conf" /etc/slurm/slurm.conf; do
      [ -r "$candidate" ] && { slurm_conf=$candidate; break; }
    done
  fi
  [ -r "$slurm_conf" ] || die "no slurm.conf found: give it with --slurm-conf"
  export SLURM_CONF=$slurm_conf
}

header_version() {
  local number
  number=$(sed -n -E 's/^#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]+).*/\1/p' "$prefix/include/slurm/slurm_version.h")
  [ -n "$number" ] || die "cannot read SLURM_VERSION_NUMBER from $prefix/include/slurm/slurm_version.h"
  printf '%d.%02d.%d' $((16#$number >> 16 & 255)) $((16#$number >> 8 & 255)) $((16#$number & 255))
}

check_versions() {
  local built running
  built=$(header_version)
  running=$("$prefix/bin/srun" --version | awk '{print $2}')
  # Slurm loads a plugin only when its plugin_version matches; a silent mismatch would break every srun.
  [ "$built" = "$running" ] || die "Slurm headers in $prefix/include are $built but $prefix/bin/srun is $running; install the headers of the running Slurm and run again"
  say "Slurm $running at $prefix"
}

build_plugin() {
  if [ -z "$build_dir" ]; then
    build_dir=$(mktemp -d /tmp/slurm-ddp-build.XXXXXX)
    trap 'rm -rf "$build_dir"' EXIT
  fi
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$SOURCE" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDDP_BUILD_RUNTIME=OFF \
        -DBUILD_TESTING=OFF -DSLURM_INCLUDE_DIR="$prefix/include" >/dev/null
  cmake --build "$build_dir" --target ddp_spank -j "$(nproc)" >/dev/null
  built_plugin="$build_dir/spank_plugin/ddp.so"
}

locate_targets() {
  [ -n "$plugin_dir" ] || plugin_dir=$(conf_value PluginDir | cut -d: -f1)
  if [ -z "$plugin_dir" ]; then
    local found
    found=$(find "$prefix/lib" "$prefix/lib64" -maxdepth 3 -name auth_munge.so 2>/dev/null | head -n 1)
    [ -n "$found" ] || die "cannot find Slurm's plugin directory: give it with --plugin-dir"
    plugin_dir=$(dirname "$found")
  fi
  [ -d "$plugin_dir" ] || die "plugin directory $plugin_dir does not exist"
  [ -n "$plugstack" ] || plugstack=$(conf_value PlugStackConfig)
  [ -n "$plugstack" ] || plugstack="$(dirname "$slurm_conf")/plugstack.conf"
}

# Writes $2 to file $1 only when the content differs, so a second run changes nothing.
write_if_changed() {
  local file=$1 content=$2
  if [ -f "$file" ] && [ "$(cat "$file")" = "$content" ]; then
    say "unchanged: $file"
  else
    printf '%s\n' "$content" >"$file.new" && chmod 0644 "$file.new" && mv "$file.new" "$file"
    say "wrote: $file"
  fi
}

# Processes that run a step (srun, slurmstepd on every node) map ddp.so, often from a PluginDir on shared storage.
# The live file is never written to: the new one is written under a name of its own and renamed over it, in one
# step. Its inode keeps a name too (ddp.so.<its SHA-256 prefix>): NFS removes a replaced file's inode at the server
# once no name is left, and a process on another node mapping it would die of SIGBUS at its next page fault. The
# five newest such copies are kept (a step started before five installs has long reloaded).
install_plugin() {
  local live=$plugin_dir/ddp.so new old
  if cmp -s "$built_plugin" "$live"; then
    say "unchanged: $live"
    return
  fi
  new=$(mktemp "$plugin_dir/.ddp.so.XXXXXX")
  cat "$built_plugin" >"$new"
  chmod 0755 "$new"
  if [ -f "$live" ]; then
    old=$plugin_dir/ddp.so.$(sha256sum "$live" | cut -c1-16)
    [ -e "$old" ] || ln "$live" "$old"
  fi
  mv -f "$new" "$live"
  find "$plugin_dir" -maxdepth 1 -name 'ddp.so.????????????????' -printf '%T@ %p\n' | sort -rn | tail -n +6 |
    cut -d' ' -f2- | while IFS= read -r copy; do rm -f "$copy"; done
  say "installed: $live${old:+ (the previous one stays as $old for the processes that map it)}"
}

configure_plugstack() {
  local line="$mode $plugin_dir/ddp.so${args[*]:+ ${args[*]}}" include_dir
  [ -f "$plugstack" ] || write_if_changed "$plugstack" "include $(dirname "$plugstack")/plugstack.conf.d/*.conf"
  include_dir=$(sed -n -E 's/^[[:space:]]*include[[:space:]]+(.*)\/\*(\.conf)?[[:space:]]*$/\1/p' "$plugstack" | head -n 1)
  if [ -n "$include_dir" ]; then
    mkdir -p "$include_dir"
    write_if_changed "$include_dir/zz-ddp.conf" "$line"
    # Earlier versions wrote ddp.conf, which sorts before pyxis.conf; two ddp.so lines would clash.
    if [ -f "$include_dir/ddp.conf" ] && grep -q '/ddp\.so\([[:space:]]\|$\)' "$include_dir/ddp.conf"; then
      rm -f "$include_dir/ddp.conf"
      say "removed: $include_dir/ddp.conf (now zz-ddp.conf, after pyxis.conf)"
    fi
    check_order "$include_dir"
  else
    # No include directory: keep exactly one ddp.so line in plugstack.conf itself.
    write_if_changed "$plugstack" "$(grep -v '/ddp\.so\([[:space:]]\|$\)' "$plugstack"; echo "$line")"
  fi
}

# A file of the include directory that sorts after zz-ddp.conf and loads pyxis would import its container's
# environment over ddp.so's: said, not fixed (the admin named it).
check_order() {
  local later
  later=$(find "$1" -maxdepth 1 -name '*.conf' 2>/dev/null | LC_ALL=C sort |
    LC_ALL=C awk -v ddp="$1/zz-ddp.conf" '$0 > ddp' | xargs -r grep -l 'pyxis' 2>/dev/null || true)
  [ -z "$later" ] || say "warning: $later loads pyxis after zz-ddp.conf; rename it to sort before zz-ddp.conf, or ddp.so refuses every --ddp step in a pyxis container"
}

verify() {
  local help
  help=$("$prefix/bin/srun" --help 2>&1)
  grep -q -- '--ddp-verbose' <<<"$help" ||
    die "srun --help does not list --ddp after the install; check $plugstack and the slurmctld/slurmd logs"
  say "srun loads the plugin: srun --help lists --ddp"
}

parse_args "$@"
locate_slurm
check_versions
build_plugin
locate_targets
install_plugin
configure_plugstack
verify
