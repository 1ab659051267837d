#!/usr/bin/env bash
# Installs the slurm-ddp SPANK plugin (ddp.so) into a Slurm: an AWS ParallelCluster head node (Slurm in /opt/slurm,
# shared with every compute node), an AWS PCS node (/opt/aws/pcs/scheduler/slurm-<ver>), or any Slurm.
#
#   sudo ./install-head-node.sh [options] [KEY=VALUE ...]
#
# KEY=VALUE pairs become the plugin's admin defaults on its plugstack line, e.g. port_range=20000-29999.
# It builds with make and a C++17 compiler alone (spank_plugin/Makefile): nothing is downloaded or installed but
# the plugin. What is missing is named first, one line each with the command that installs it.
# Options:
#   --slurm-prefix DIR   Slurm's install prefix (default: that of the srun on PATH, else the newest
#                        /opt/aws/pcs/scheduler/slurm-* (AWS PCS), else /opt/slurm (ParallelCluster), else /usr)
#   --slurm-conf FILE    slurm.conf (default: the running Slurm's (scontrol show config), else $SLURM_CONF, else
#                        PREFIX/etc/slurm.conf, PCS's /etc/aws/pcs/scheduler/slurm-<ver>/slurm.conf, /etc/slurm/slurm.conf)
#   --plugin-dir DIR     where ddp.so goes (default: the running Slurm's PluginDir, else slurm.conf's, else the
#                        directory of auth_munge.so)
#   --plugstack FILE     the plugstack.conf to use (default: the running Slurm's PlugStackConfig, else slurm.conf's,
#                        else beside slurm.conf)
#   --build-dir DIR      build directory (default: a fresh temporary directory)
#   --tools-dir DIR      also install ddp-why, ddp-topo and ddp-restart there (e.g. /opt/slurm-ddp/bin)
#   --require-include    refuse a plugstack.conf that includes no directory, rather than adding ddp.so's line to it
#                        (ParallelCluster and PCS regenerate plugstack.conf; a snippet in its directory survives)
#   --check              check what the install needs and say what is missing; build and write nothing
#   --optional           plugstack line "optional" instead of "required". required: a node where ddp.so is missing
#                        or fails to load runs no job step at all (a broken node shows at once); use it when the
#                        plugin is part of every node's image. optional: such a node still runs steps without
#                        --ddp, and srun refuses --ddp where ddp.so is missing; use it while rolling out or
#                        upgrading, or when ddp.so sits on shared storage that a node may reach late.
# Running it twice changes nothing: files are only written when their content differs. It refuses to install
# a plugin built against headers of another Slurm series than the srun it finds.
# Order: ddp.so must come after pyxis in the plugin stack. pyxis's task_init imports its container's environment
# into every task over what is there (and enroot's pytorch hook puts MASTER_ADDR, MASTER_PORT and WORLD_SIZE
# into that environment); ddp.so after it sets the contract last, inside the container's view. Slurm reads an
# include directory in sorted order, so the snippet is plugstack.conf.d/zz-ddp.conf (after pyxis.conf), and a
# ddp.so line in plugstack.conf itself goes last. An order that would let pyxis win is refused by ddp.so at every
# step that asks for a container.
set -euo pipefail

SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
PROGRAM=install-head-node
# shellcheck source=install_lib.sh
source "$(dirname "$0")/install_lib.sh"
prefix="" slurm_conf="" plugin_dir="" plugstack="" build_dir="" tools_dir="" mode=required args=()
require_include=false check_only=false

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --slurm-prefix) prefix=${2:?--slurm-prefix needs a directory}; shift 2 ;;
      --slurm-conf) slurm_conf=${2:?--slurm-conf needs a file}; shift 2 ;;
      --plugin-dir) plugin_dir=${2:?--plugin-dir needs a directory}; shift 2 ;;
      --plugstack) plugstack=${2:?--plugstack needs a file}; shift 2 ;;
      --build-dir) build_dir=${2:?--build-dir needs a directory}; shift 2 ;;
      --tools-dir) tools_dir=${2:?--tools-dir needs a directory}; shift 2 ;;
      --require-include) require_include=true; shift ;;
      --check) check_only=true; shift ;;
      --optional) mode=optional; shift ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
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

# Value of KEY in the running Slurm's configuration (scontrol show config), empty when slurmctld does not answer.
running_value() {
  [ -n "$running_config" ] || return 0
  sed -n -E "s/^$1[[:space:]]+=[[:space:]]+([^[:space:]]+).*/\\1/p" <<<"$running_config" | head -n 1
}

# The prefix of the Slurm this node runs: given, else that of srun on PATH, else ParallelCluster's, else the newest
# PCS one, else the distribution's.
find_prefix() {
  [ -z "$prefix" ] || return 0
  local srun pcs
  srun=$(command -v srun 2>/dev/null || true)
  pcs=$(find /opt/aws/pcs/scheduler -maxdepth 1 -name 'slurm-*' -type d 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$srun" ]; then
    prefix=$(dirname "$(dirname "$srun")")
  elif [ -n "$pcs" ]; then
    prefix=$pcs
  elif [ -d /opt/slurm ]; then
    prefix=/opt/slurm
  else
    prefix=/usr
  fi
}

locate_slurm() {
  find_prefix
  [ -r "$prefix/include/slurm/spank.h" ] ||
    die "no $prefix/include/slurm/spank.h: this Slurm has no headers; give the prefix of a Slurm installed with them with --slurm-prefix (ParallelCluster: /opt/slurm; Debian and Ubuntu: apt-get install libslurm-dev)"
  [ -x "$prefix/bin/srun" ] || die "no $prefix/bin/srun: give the Slurm prefix with --slurm-prefix"
  # The running Slurm's own view, where its controller answers (with the slurm.conf given, else Slurm's default).
  local conf_env=()
  [ -z "${slurm_conf:-${SLURM_CONF:-}}" ] || conf_env=(SLURM_CONF="${slurm_conf:-$SLURM_CONF}")
  running_config=$(env "${conf_env[@]}" timeout 20 "$prefix/bin/scontrol" show config 2>/dev/null || true)
  if [ -z "$slurm_conf" ]; then
    local candidate pcs_conf=""
    case $prefix in /opt/aws/pcs/scheduler/slurm-*) pcs_conf=/etc/aws/pcs/scheduler/$(basename "$prefix")/slurm.conf ;; esac
    for candidate in "$(running_value SLURM_CONF)" "${SLURM_CONF:-}" "$prefix/etc/slurm.conf" $pcs_conf /etc/slurm/slurm.conf; do
      [ -n "$candidate" ] && [ -r "$candidate" ] && { slurm_conf=$candidate; break; }
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

# Slurm loads a SPANK plugin only when its plugin_version is of the running series (major.minor): a plugin built
# against another series' headers would break every srun.
check_versions() {
  local built running
  built=$(header_version)
  running=$("$prefix/bin/srun" --version | awk '{print $2}')
  [ "${built%.*}" = "${running%.*}" ] ||
    die "Slurm headers in $prefix/include are $built but $prefix/bin/srun is $running; install the headers of the running Slurm (series ${running%.*}) and run again"
  say "Slurm $running at $prefix"
}

locate_targets() {
  [ -n "$plugin_dir" ] || plugin_dir=$(running_value PluginDir | cut -d: -f1)
  [ -n "$plugin_dir" ] || plugin_dir=$(conf_value PluginDir | cut -d: -f1)
  if [ -z "$plugin_dir" ]; then
    local found
    # One of lib and lib64 is usually missing: find's complaint about it is no failure here.
    found=$(find "$prefix/lib" "$prefix/lib64" -maxdepth 3 -name auth_munge.so 2>/dev/null | head -n 1 || true)
    [ -n "$found" ] || die "cannot find Slurm's plugin directory: give it with --plugin-dir"
    plugin_dir=$(dirname "$found")
  fi
  [ -d "$plugin_dir" ] || die "plugin directory $plugin_dir does not exist"
  [ -n "$plugstack" ] || plugstack=$(running_value PlugStackConfig)
  [ -n "$plugstack" ] || plugstack=$(conf_value PlugStackConfig)
  [ -n "$plugstack" ] || plugstack="$(dirname "$slurm_conf")/plugstack.conf"
}

# The directory plugstack.conf includes (`include DIR/*` or `include DIR/*.conf`), empty when none.
include_dir_of() {
  [ -f "$1" ] || return 0
  sed -n -E 's/^[[:space:]]*include[[:space:]]+(.*)\/\*(\.conf)?[[:space:]]*$/\1/p' "$1" | head -n 1
}

check_plugstack() {
  $require_include || return 0
  [ -f "$plugstack" ] || return 0  # written with its include line below
  [ -n "$(include_dir_of "$plugstack")" ] ||
    die "$plugstack includes no directory: add the line 'include $(dirname "$plugstack")/plugstack.conf.d/*' (ParallelCluster's and PCS's layout) and run again"
}

check_build_tools() {
  local lines=() piece
  command -v make >/dev/null || lines+=("missing: make: $(install_command make)")
  if [ ${#lines[@]} -eq 0 ]; then
    local out
    out=$(make -s -C "$SOURCE/spank_plugin" check-deps SLURM_INCLUDE_DIR="$prefix/include" 2>&1) || true
    while IFS= read -r piece; do [ -z "$piece" ] || lines+=("$(fill_install_commands "$piece")"); done <<<"$out"
  fi
  [ ${#lines[@]} -eq 0 ] && return 0
  printf '%s: %s\n' "$PROGRAM" "${lines[@]}" >&2
  die "nothing was built or installed; install what is named above and run again"
}

# The Makefile names every system's package; this one's command is the one to run.
fill_install_commands() {
  case $1 in
    *"C++17 compiler"*) echo "missing: a C++17 compiler: $(install_command cxx)" ;;
    *"a C compiler"*) echo "missing: a C compiler: $(install_command cc)" ;;
    *"hwloc 2 headers"*) echo "missing: the hwloc 2 headers (hwloc.h): $(install_command hwloc)" ;;
    *) echo "$1" ;;
  esac
}

build_plugin() {
  if [ -z "$build_dir" ]; then
    build_dir=$(mktemp -d /tmp/slurm-ddp-build.XXXXXX)
    trap 'rm -rf "$build_dir"' EXIT
  fi
  local targets=(plugin) log
  [ -z "$tools_dir" ] || targets+=(tools)
  log=$(make -C "$SOURCE/spank_plugin" SLURM_INCLUDE_DIR="$prefix/include" O="$build_dir" -j "$(nproc)" "${targets[@]}" 2>&1) ||
    { tail -n 20 <<<"$log" >&2; die "the build failed (above); nothing was installed"; }
  built_plugin="$build_dir/ddp.so"
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

configure_plugstack() {
  local line="$mode $plugin_dir/ddp.so${args[*]:+ ${args[*]}}" include_dir
  [ -f "$plugstack" ] || write_if_changed "$plugstack" "include $(dirname "$plugstack")/plugstack.conf.d/*.conf"
  include_dir=$(include_dir_of "$plugstack")
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

install_tools() {
  [ -n "$tools_dir" ] || return 0
  mkdir -p "$tools_dir"
  local tool
  for tool in ddp-why ddp-topo; do install_shared_file "$build_dir/$tool" "$tools_dir/$tool" 0755; done
  install_shared_file "$SOURCE/sbatch_templates/ddp-restart" "$tools_dir/ddp-restart" 0755
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
locate_targets
check_plugstack
check_build_tools
if $check_only; then
  say "ready to build against Slurm $(header_version) at $prefix: ddp.so into $plugin_dir, plugstack $plugstack"
  exit 0
fi
build_plugin
install_shared_file "$built_plugin" "$plugin_dir/ddp.so" 0755
configure_plugstack
install_tools
verify
