#!/usr/bin/env bash
# Installs the Debian packages berth needs when they are missing. Root installs them;
# anyone else is told what to install.
set -euo pipefail

# command → Debian package
declare -A needed=(
  [runc]=runc
  [cc]=gcc
)
missing=()
for cmd in "${!needed[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${needed[$cmd]}")
done
# static glibc for berth-init
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ "$(uname -m)" != x86_64 ] || missing+=(libc6-dev)

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "berth needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
