# Helpers of the install scripts beside this file (install-head-node.sh, install-ddp-train.sh,
# install-compute-node.sh, pcluster-head-node.sh). Source it after defining PROGRAM (the script's name in messages).
# shellcheck shell=bash

die() { echo "$PROGRAM: $*" >&2; exit 1; }
say() { echo "$PROGRAM: $*"; }

# The package manager's install command of this system and its name for each piece, from /etc/os-release
# (DDP_OS_RELEASE names another file: tests). The systems ParallelCluster runs: Ubuntu 22.04/24.04 (apt), Amazon
# Linux 2023 and RHEL 8/9 (dnf), Amazon Linux 2 (yum); the package names are those of each distribution's index
# (docs/admin.md). Prints "COMMAND PACKAGE", or a line naming every system when this one is none of them.
install_command() {  # PIECE: cxx | cc | make | hwloc | cmake | zlib | hwloc-runtime
  local id like pkg
  # shellcheck source=/dev/null  # the system's os-release
  id=$(. "${DDP_OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo "${ID:-}")
  # shellcheck source=/dev/null
  like=$(. "${DDP_OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo "${ID_LIKE:-}")
  case " $id $like " in
    *" debian "* | *" ubuntu "*)
      case $1 in cxx) pkg=g++ ;; cc) pkg="gcc" ;; make) pkg="make" ;; hwloc) pkg=libhwloc-dev ;; cmake) pkg=cmake ;;
        zlib) pkg=zlib1g-dev ;; hwloc-runtime) pkg=libhwloc15 ;; esac
      echo "apt-get install -y $pkg" ;;
    *" amzn "* | *" rhel "* | *" fedora "* | *" centos "*)
      local tool=dnf version
      # shellcheck source=/dev/null
      version=$(. "${DDP_OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo "${VERSION_ID:-}")
      # Amazon Linux 2 has yum, and names CMake 3 cmake3 (its cmake is 2.8).
      if [ "$id" = amzn ] && [ "$version" = 2 ]; then tool=yum; fi
      case $1 in cxx) pkg=gcc-c++ ;; cc) pkg="gcc" ;; make) pkg="make" ;; hwloc) pkg=hwloc-devel ;; zlib) pkg=zlib-devel ;;
        cmake) if [ "$tool" = yum ]; then pkg=cmake3; else pkg=cmake; fi ;; hwloc-runtime) pkg=hwloc-libs ;; esac
      echo "$tool install -y $pkg" ;;
    *)
      case $1 in
        cxx) echo "your distribution's C++ compiler (g++ | gcc-c++)" ;; cc) echo "your distribution's gcc" ;;
        make) echo "your distribution's make" ;; hwloc) echo "your distribution's hwloc headers (libhwloc-dev | hwloc-devel)" ;;
        cmake) echo "your distribution's cmake (3.18 or later)" ;; zlib) echo "your distribution's zlib headers (zlib1g-dev | zlib-devel)" ;;
        hwloc-runtime) echo "your distribution's hwloc library (libhwloc15 | hwloc-libs)" ;;
      esac ;;
  esac
}

# Copies SRC over DEST, a file that processes on other nodes may run or map (a PluginDir or bin directory on shared
# storage). DEST is never written in place: the new file gets a name of its own and is renamed over it, in one step.
# Its inode keeps a name too (DEST.<its SHA-256 prefix>): NFS removes a replaced file's inode at the server once no
# name is left, and a process on another node mapping it would die of SIGBUS at its next page fault. The five
# newest such copies are kept (a step started before five installs has long reloaded). MODE is the new file's.
# Prints what it did; returns 0 also when DEST already had SRC's content.
install_shared_file() {  # SRC DEST MODE
  local src=$1 live=$2 mode=$3 new old="" dir base
  dir=$(dirname "$live") base=$(basename "$live")
  if cmp -s "$src" "$live"; then
    say "unchanged: $live"
    return 0
  fi
  new=$(mktemp "$dir/.$base.XXXXXX")
  cat "$src" >"$new"
  chmod "$mode" "$new"
  if [ -f "$live" ]; then
    old=$live.$(sha256sum "$live" | cut -c1-16)
    [ -e "$old" ] || ln "$live" "$old"
  fi
  mv -f "$new" "$live"
  find "$dir" -maxdepth 1 -name "$base.????????????????" -printf '%T@ %p\n' | sort -rn | tail -n +6 |
    cut -d' ' -f2- | while IFS= read -r copy; do rm -f "$copy"; done
  say "installed: $live${old:+ (the previous one stays as $old for the processes that map it)}"
}
