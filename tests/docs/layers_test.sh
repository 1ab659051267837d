#!/usr/bin/env bash
# The folders are layers (docs/developing.md, "Where the code is"): each includes its own headers and those of the
# layers below it, never one above it or beside it. Read from the sources' #include lines, no build needed; a
# failure names the file, the header and the layers that file may use.
#   layers_test.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: layers_test.sh SOURCE_DIR}"

# folder: the layers it may include besides its own ("api": the installed headers, include/slurm-ddp/ddp_runtime).
declare -A MAY_USE=(
  [src/base]="core/error.hpp"
  [src/core]="base"
  [src/report]="base core"
  [src/store]="base core"
  [src/topology]="base core"
  [src/doctor/checks]="base core topology"
  [src/doctor/run]="base core topology store report doctor/checks"
  [src/tools]="base core topology store report doctor/checks doctor/run"
  [spank_plugin/step]="base core topology report doctor/checks"
  [spank_plugin]="base core topology report doctor/checks spank_plugin/step"
  [runtime/ddp_runtime/common]="base core api"
  [runtime/ddp_runtime/snapshots]="base core api ddp_runtime/common"
  [runtime/ddp_runtime/data]="base core api ddp_runtime/common ddp_runtime/snapshots"
  [runtime/ddp_runtime/distributed]="base core store api ddp_runtime/common"
  [runtime/ddp_runtime/options]="base core api ddp_runtime/common ddp_runtime/snapshots"
  [runtime/ddp_runtime/training]="base core report store api ddp_runtime/common ddp_runtime/snapshots ddp_runtime/data ddp_runtime/distributed ddp_runtime/options"
  [runtime/ddp-train]="api"
)

# The layer a header belongs to, from its include path.
layer_of() {
  case $1 in
    spank_plugin/step/*) echo spank_plugin/step ;;
    core/error.hpp) echo core/error.hpp ;;
    ddp_runtime/*/*) echo "${1%/*}" ;;
    ddp_runtime/*) echo api ;;
    doctor/*/*) echo "${1%/*}" ;;
    */*) echo "${1%%/*}" ;;
    *) echo own ;;  # beside the including file
  esac
}

own_layer() {  # FOLDER: how its own headers are named
  case $1 in
    src/doctor/*) echo "${1#src/}" ;;
    src/*) echo "${1#src/}" ;;
    runtime/ddp_runtime/*) echo "ddp_runtime/${1#runtime/ddp_runtime/}" ;;
    *) echo "$1" ;;
  esac
}

bad=0
checked=0
for folder in "${!MAY_USE[@]}"; do
  [ -d "$folder" ] || { echo "FAIL: the layer table names $folder, which does not exist"; bad=1; continue; }
  own=$(own_layer "$folder")
  while IFS= read -r file; do
    while IFS= read -r header; do
      layer=$(layer_of "$header")
      checked=$((checked + 1))
      case " own $own ${MAY_USE[$folder]} " in
        *" $layer "*) continue ;;
      esac
      # core/error.hpp is the core's, so a folder that may use the core may include it.
      [ "$layer" = core/error.hpp ] && case " $own ${MAY_USE[$folder]} " in *" core "*) continue ;; esac
      echo "FAIL: $file includes \"$header\" ($layer), not a layer below $folder: it may use ${MAY_USE[$folder]}" \
        "(docs/developing.md); move the code down a layer or the caller up"
      bad=1
    done < <(sed -n -E 's/^#include "([^"]+)".*/\1/p' "$file")
  done < <(find "$folder" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.c' -o -name '*.h' \) | sort)
done
# Every folder that holds sources is in the table: a new one gets its place among the layers.
while IFS= read -r folder; do
  [ -n "${MAY_USE[$folder]+set}" ] || { echo "FAIL: $folder holds sources but has no row in layers_test.sh's table"; bad=1; }
done < <(find src spank_plugin runtime/ddp_runtime runtime/ddp-train -type f \( -name '*.cpp' -o -name '*.hpp' \) \
  -printf '%h\n' | sort -u)
[ "$checked" -gt 300 ] || { echo "FAIL: only $checked includes read: the reader is broken"; exit 1; }
[ "$bad" -eq 0 ] || exit 1
echo "layers_test: $checked includes in ${#MAY_USE[@]} folders, each of its own layer or one below"
