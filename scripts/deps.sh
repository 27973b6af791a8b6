#!/usr/bin/env bash
# Installs what sandbash needs through the system package manager, saying so,
# and only what is missing. Usage: scripts/deps.sh bwrap
set -euo pipefail

say() { echo "deps: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else say "need root to run: $*; run it as root or install sudo"; exit 1
  fi
}

apt_updated=
apt_install() {
  if ! command -v apt-get >/dev/null; then
    say "no apt-get here: install these packages with your package manager: $*"
    exit 1
  fi
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -qq
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

for want in "$@"; do
  case "$want" in
    bwrap)
      if ! command -v bwrap >/dev/null; then
        say "installing bubblewrap with apt-get: sandbash's sandbox on hosts without Docker or Podman"
        apt_install bubblewrap
      fi ;;
    *) say "unknown component $want"; exit 2 ;;
  esac
done
