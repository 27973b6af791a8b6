#!/usr/bin/env bash
# Installs what sandbash needs through the system package manager, saying so,
# and only what is missing, and starts daemons that are not running.
# Usage: scripts/deps.sh [bwrap] [images] [docker] [docker-images] [podman] [podman-images] [inspector]
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
      fi
      if ! command -v git >/dev/null; then
        say "installing git with apt-get: the conformance suite builds repositories with it, and bwrap runs the host's git"
        apt_install git
      fi
      if ! command -v gcc >/dev/null; then
        say "installing gcc with apt-get: the bwrap tests build a small LD_PRELOAD library"
        apt_install gcc libc6-dev
      fi
      if ! command -v slirp4netns >/dev/null || ! command -v ip >/dev/null || ! command -v curl >/dev/null; then
        say "installing slirp4netns, iproute2 and curl with apt-get: bwrap's --network on, the network tests' test host, and their HTTPS client"
        apt_install slirp4netns iproute2 curl
      fi ;;
    images)
      if [ ! -x /bin/bash-static ] || [ ! -x /bin/busybox ]; then
        say "installing bash-static and busybox-static with apt-get: the test images are built from them"
        apt_install bash-static busybox-static
      fi
      if ! command -v git >/dev/null || ! command -v curl >/dev/null; then
        say "installing git and curl with apt-get: the test image sandbash-test-git copies them"
        apt_install git curl
      fi ;;
    docker)
      if ! command -v dockerd >/dev/null; then
        say "installing docker.io with apt-get: the Docker backend's engine"
        apt_install docker.io
      fi
      if ! docker version >/dev/null 2>&1; then
        say "starting dockerd (log: /tmp/deps-dockerd.log)"
        as_root sh -c 'cd / && nohup dockerd >/tmp/deps-dockerd.log 2>&1 &'
        for _ in $(seq 1 60); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
        docker version >/dev/null 2>&1 || { say "dockerd did not answer in 30 s; see /tmp/deps-dockerd.log"; exit 1; }
      fi ;;
    docker-images)
      missing=
      for i in base:sandbash-test:latest env:sandbash-test-env:2 go:sandbash-test-go:latest git:sandbash-test-git:2; do
        docker image inspect "${i#*:}" >/dev/null 2>&1 || missing="$missing ${i%%:*}"
      done
      if [ -n "$missing" ]; then
        say "building the missing test images ($missing ) into docker (scripts/images.sh)"
        IMAGES="$missing" "$(dirname "$0")/images.sh" docker
      fi ;;
    podman)
      if ! command -v podman >/dev/null || ! dpkg -s catatonit >/dev/null 2>&1; then
        say "installing podman and catatonit with apt-get: the Podman backend's engine and its init"
        apt_install podman catatonit
      fi
      command -v curl >/dev/null || apt_install curl
      if ! curl -fsS --unix-socket /run/podman/podman.sock http://d/_ping >/dev/null 2>&1; then
        say "starting the Podman API service on /run/podman/podman.sock (log: /tmp/deps-podman.log)"
        as_root mkdir -p /run/podman
        as_root sh -c 'cd / && nohup podman system service --time=0 unix:///run/podman/podman.sock >/tmp/deps-podman.log 2>&1 &'
        for _ in $(seq 1 60); do curl -fsS --unix-socket /run/podman/podman.sock http://d/_ping >/dev/null 2>&1 && break; sleep 0.5; done
        curl -fsS --unix-socket /run/podman/podman.sock http://d/_ping >/dev/null 2>&1 || { say "the Podman service did not answer in 30 s; see /tmp/deps-podman.log"; exit 1; }
      fi ;;
    podman-images)
      missing=
      for i in base:sandbash-test:latest env:sandbash-test-env:2 go:sandbash-test-go:latest git:sandbash-test-git:2; do
        podman image exists "localhost/${i#*:}" || missing="$missing ${i%%:*}"
      done
      if [ -n "$missing" ]; then
        say "building the missing test images ($missing ) into podman (scripts/images.sh)"
        IMAGES="$missing" "$(dirname "$0")/images.sh" podman
      fi ;;
    inspector)
      # The official MCP inspector CLI, for the end-to-end MCP test. 0.15.0
      # is the newest that runs on Node.js 20 (later ones need 22).
      # The MCP HTTP tests also try the server as a second local user, with curl.
      command -v curl >/dev/null || { say "installing curl with apt-get: the MCP HTTP tests send requests with it as another local user"; apt_install curl; }
      dir="${XDG_CACHE_HOME:-$HOME/.cache}/sandbash/inspector"
      if [ ! -x "$dir/node_modules/.bin/mcp-inspector" ]; then
        command -v npm >/dev/null || { say "installing nodejs and npm with apt-get: the MCP inspector runs on them"; apt_install nodejs npm; }
        say "installing the MCP inspector (@modelcontextprotocol/inspector@0.15.0) into $dir"
        mkdir -p "$dir"
        (cd "$dir" && npm install --silent --no-audit --no-fund @modelcontextprotocol/inspector@0.15.0 >/dev/null)
      fi ;;
    k8s)
      # The single-node cluster of scripts/k8s.sh: etcd, its own containerd
      # (with runc), the CNI plugins, jq for its no-network runc wrapper.
      if ! command -v etcd >/dev/null || ! command -v containerd >/dev/null || ! command -v runc >/dev/null ||
        [ ! -x /usr/lib/cni/bridge ] || ! command -v jq >/dev/null || ! command -v openssl >/dev/null || ! command -v curl >/dev/null; then
        say "installing etcd-server, containerd, runc, containernetworking-plugins, jq, openssl and curl with apt-get: the Kubernetes backend's test cluster"
        apt_install etcd-server containerd runc containernetworking-plugins jq openssl curl
      fi ;;
    k8s-up)
      say "bringing up the test cluster (scripts/k8s.sh up; the first time it builds kube-apiserver, kubelet and kubectl)"
      as_root "$(dirname "$0")/k8s.sh" up >/dev/null ;;
    *) say "unknown component $want"; exit 2 ;;
  esac
done
