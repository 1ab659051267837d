#!/usr/bin/env bash
# Every name a user or an admin can type or read is documented: names_in_docs.sh SOURCE_DIR [DOCS_DIR]
# reads, from the sources (not from built binaries, so that it runs on every stack without a build),
#   - the --ddp* options of the plugin's option table (spank_plugin/step/options.cpp, option_table()),
#   - the plugstack.conf keys its config parser accepts (spank_plugin/step/options.cpp, config_key_table()),
#   - the environment variable names of src/core/env_names.hpp (ddp::vars::k*),
#   - ddp-doctor's check names (src/doctor/checks/catalogue.hpp, the CHECK rows of DDP_DOCTOR_CHECKS),
#   - ddp-train's long options (runtime/ddp_runtime/options/cli.cpp) and ddp-doctor's (src/doctor/run/doctor_options.cpp),
# and looks for each in DOCS_DIR/*.md (default: SOURCE_DIR/docs), as a whole name: `--keep` is not found inside
# `--keep-going`, nor `gpu.driver` inside `gpu.driver_bound`; a plugstack.conf key counts only written as `key` in
# backquotes or as key=VALUE. Exit status 0 when every name is found; 1 listing each missing name with the page to
# add it to, or when an extraction finds fewer names than the sources plainly hold (the extraction broke, and the
# test must not pass on an empty list); 2 on a usage error.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 SOURCE_DIR [DOCS_DIR]" >&2
  exit 2
fi
src=$1
docs=${2:-$src/docs}
shopt -s nullglob
pages=("$docs"/*.md)
if [[ ${#pages[@]} -eq 0 ]]; then
  echo "names_in_docs: no .md file in $docs" >&2
  exit 1
fi

failed=0
missing=0

# need KIND MINIMUM COUNT: an extraction that found fewer than MINIMUM names broke.
need() {
  if [[ $3 -lt $2 ]]; then
    echo "names_in_docs: found $3 $1 in the sources, expected at least $2: the extraction broke; fix it in $0" >&2
    failed=1
  fi
}

# documented NAME MODE: whether NAME appears as a whole name in the pages. MODE key: only as `NAME` or NAME=.
documented() {
  local escaped=${1//./\\.}
  local pattern="(^|[^A-Za-z0-9_.-])${escaped}(\$|[^A-Za-z0-9_-])"
  [[ $2 == key ]] && pattern="\`${escaped}\`|(^|[^A-Za-z0-9_.-])${escaped}="
  grep -qE -e "$pattern" "${pages[@]}"
}

# check KIND PAGE MODE NAME...: names missing from the pages, each with the page to add it to.
check() {
  local kind=$1 page=$2 mode=$3 name
  shift 3
  for name in "$@"; do
    if ! documented "$name" "$mode"; then
      echo "names_in_docs: $kind $name appears nowhere in $docs/*.md; add it to docs/$page"
      missing=$((missing + 1))
    fi
  done
}

options_cpp=$src/spank_plugin/step/options.cpp
mapfile -t plugin_options < <(sed -n '/option_table() {/,/return table;/p' "$options_cpp" |
  grep -oE '^ *\{"ddp[a-z-]*"' | sed -E 's/^ *\{"/--/; s/"$//' || true)
mapfile -t config_keys < <(sed -n '/config_key_table() {/,/return keys;/p' "$options_cpp" |
  grep -oE '^ *\{"[a-z_]+"' | sed -E 's/^ *\{"//; s/"$//' || true)
mapfile -t variables < <(grep -oE 'constexpr char k[A-Za-z0-9]+\[\] = "[A-Z][A-Z0-9_]*"' "$src/src/core/env_names.hpp" |
  sed -E 's/.*= "//; s/"$//' || true)
catalogue_hpp=$src/src/doctor/checks/catalogue.hpp
mapfile -t checks < <(grep -oE '^ *CHECK\(k[A-Za-z0-9]+, *"[^"]+"' "$catalogue_hpp" |
  sed -E 's/.*"([^"]+)"$/\1/' || true)
declared_checks=$(grep -cE '^ *CHECK\(k' "$catalogue_hpp" || true)
mapfile -t train_options < <(grep -ohE '\{"--[a-z][a-z-]*"|arg == "--[a-z][a-z-]*"' "$src/runtime/ddp_runtime/options/cli.cpp" |
  grep -oE -e '--[a-z][a-z-]*' | grep -vx -e '--help' | sort -u || true)
mapfile -t doctor_options < <(grep -ohE '\{"--[a-z][a-z-]*"|arg == "--[a-z][a-z-]*"' "$src/src/doctor/run/doctor_options.cpp" |
  grep -oE -e '--[a-z][a-z-]*' | grep -vx -e '--help' | sort -u || true)

need "--ddp* options" 8 "${#plugin_options[@]}"
need "plugstack.conf keys" 8 "${#config_keys[@]}"
need "variables" 20 "${#variables[@]}"
declared_variables=$(grep -cE 'constexpr char k[A-Za-z0-9]+\[\]' "$src/src/core/env_names.hpp" || true)
if [[ ${#variables[@]} -ne $declared_variables ]]; then
  echo "names_in_docs: src/core/env_names.hpp declares $declared_variables names but ${#variables[@]} were read: the" \
    "extraction broke; fix it in $0" >&2
  failed=1
fi
need "doctor checks" 25 "${#checks[@]}"
if [[ ${#checks[@]} -ne $declared_checks ]]; then
  echo "names_in_docs: $catalogue_hpp declares $declared_checks checks but ${#checks[@]} names were read: the" \
    "extraction broke; fix it in $0" >&2
  failed=1
fi
need "ddp-train options" 20 "${#train_options[@]}"
need "ddp-doctor options" 10 "${#doctor_options[@]}"
[[ $failed -eq 0 ]] || exit 1

check "plugin option" plugin.md name "${plugin_options[@]}"
check "plugstack.conf key" admin.md key "${config_keys[@]}"
check "variable" plugin.md name "${variables[@]}"
check "doctor check" doctor-checks.md name "${checks[@]}"
check "ddp-train option" runtime.md name "${train_options[@]}"
check "ddp-doctor option" doctor.md name "${doctor_options[@]}"

echo "names_in_docs: ${#plugin_options[@]} plugin options, ${#config_keys[@]} plugstack.conf keys," \
  "${#variables[@]} variables, ${#checks[@]} doctor checks, ${#train_options[@]} ddp-train options," \
  "${#doctor_options[@]} ddp-doctor options; $missing missing from $docs/*.md"
[[ $missing -eq 0 ]]
