#!/usr/bin/env bash
# The tracked C and C++ sources follow .clang-format. Checked with clang-format 14 (Debian 12) and 19 (Debian 13),
# which format this code alike; other versions break some lines differently, so there the test is a skip.
#   clang_format_check.sh SOURCE_DIR
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null || { echo "SKIP: clang-format is not installed"; exit 77; }
major=$(clang-format --version | sed -n -E 's/.*version ([0-9]+)\..*/\1/p')
case $major in
  14 | 19) ;;
  *) echo "SKIP: clang-format $major; .clang-format is checked with 14 and 19"; exit 77 ;;
esac
# The sources: everything but build directories (build*/ at the top, as .gitignore has them). Fix what this reports
# with the same list and clang-format -i.
sources() { find . \( -path './build*' -o -path ./.git \) -prune -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) -print0; }
sources | xargs -0 clang-format --dry-run --Werror --style=file
echo "clang-format $major: every C and C++ source follows .clang-format ($(sources | tr -cd '\0' | wc -c) files)"
