#!/usr/bin/env bash
# Proves the README's two set-up commands on a truly bare Debian 12: debootstraps a minbase bookworm root (or reuses
# one given), copies the committed tree (git archive HEAD) into it, mounts /proc and /dev, and runs
# scripts/run.sh (the main job) then scripts/test.sh inside a chroot, as root, with nothing installed beforehand.
#
#   scripts/prove-fresh-setup.sh [ROOT_DIR]      (default: /tmp/treespark-fresh; needs root, debootstrap, network
#                                                 to Debian's mirror and the npm registry)
#
# A root that was already used is not "fresh": pass a new folder (or delete the old one) for a real proof. Logs go
# to ROOT_DIR.log/{test,run}.log; the exit status is the first failing command's.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:-/tmp/treespark-fresh}"
logs="$root.log"
mkdir -p "$logs"

if [ ! -x "$root/bin/bash" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  echo "prove-fresh-setup: debootstrap --variant=minbase bookworm $root" >&2
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$logs/debootstrap.log" 2>&1
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Where this machine reaches the internet through a TLS-inspecting proxy, its CA (a local certificate, not a
# package) must be trusted inside the root too, or npm fails with SELF_SIGNED_CERT_IN_CHAIN. A machine without
# such a proxy has none to copy. When install-deps.sh installs ca-certificates, its postinst adds these.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
rm -rf "$root/opt/treespark" && mkdir -p "$root/opt/treespark"
git archive HEAD | tar -x -C "$root/opt/treespark"

mounted=()
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
for m in proc dev; do
  mountpoint -q "$root/$m" || { mount --bind "/$m" "$root/$m"; mounted+=("$root/$m"); }
done

in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 /bin/bash -c "cd /opt/treespark && $1"; }

echo "prove-fresh-setup: scripts/run.sh (log: $logs/run.log)" >&2
start=$(date +%s)
in_root scripts/run.sh >"$logs/run.log" 2>&1 || { echo "prove-fresh-setup: scripts/run.sh FAILED" >&2; tail -40 "$logs/run.log"; exit 1; }
echo "prove-fresh-setup: scripts/run.sh passed in $(( $(date +%s) - start )) s" >&2
tail -25 "$logs/run.log"
echo "prove-fresh-setup: scripts/test.sh (log: $logs/test.log)" >&2
start=$(date +%s)
in_root scripts/test.sh >"$logs/test.log" 2>&1 || { echo "prove-fresh-setup: scripts/test.sh FAILED" >&2; tail -40 "$logs/test.log"; exit 1; }
echo "prove-fresh-setup: scripts/test.sh passed in $(( $(date +%s) - start )) s: $(grep -E 'tests passed' "$logs/test.log")" >&2
