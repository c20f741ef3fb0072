#!/bin/bash
# check-runtime-deps.sh BINARY PACKAGE_LIST
# Maps every shared library BINARY loads (ldd) to the Debian package that owns it (dpkg -S on the resolved path)
# and fails if one of those packages is missing from PACKAGE_LIST (one name a line, '#' comments), or if ldd
# cannot resolve a library. Run in the image's build stage, where the build dependencies are installed, so the
# slim runtime stage installs exactly what the binary needs. Prints the mapping.
set -euo pipefail
bin="${1:?usage: check-runtime-deps.sh BINARY PACKAGE_LIST}"
list="${2:?usage: check-runtime-deps.sh BINARY PACKAGE_LIST}"
ldd_out="$(ldd "$bin")"
if grep -q 'not found' <<<"$ldd_out"; then
  echo "check-runtime-deps: unresolved libraries:" >&2
  grep 'not found' <<<"$ldd_out" >&2
  exit 1
fi
declare -A listed=()
while IFS= read -r line; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [ -n "$line" ] && listed["$line"]=1
done <"$list"
missing=()
while read -r lib; do
  real="$(readlink -f "$lib")"
  owner=""
  # Debian 12 has merged /usr: dpkg may record a file under /lib or /usr/lib.
  for candidate in "$real" "${real#/usr}" "/usr${real}"; do
    if out="$(dpkg -S "$candidate" 2>/dev/null)"; then
      owner="${out%%:*}"
      break
    fi
  done
  if [ -z "$owner" ]; then
    echo "check-runtime-deps: no package owns $lib ($real)" >&2
    exit 1
  fi
  printf '%-48s %s\n' "$lib" "$owner"
  [ -n "${listed[$owner]:-}" ] || missing+=("$owner")
done < <(awk '/=> \// {print $3}' <<<"$ldd_out")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "check-runtime-deps: add to $list: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')" >&2
  exit 1
fi
echo "check-runtime-deps: every library is covered by $list"
