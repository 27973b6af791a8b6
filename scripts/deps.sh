#!/usr/bin/env bash
# Installs what sandbash needs through the system package manager, saying so,
# and only what is missing, and starts daemons that are not running.
# Usage: scripts/deps.sh [bwrap] [images] [docker] [docker-images] [podman] [podman-images] [inspector]
#                        [user] [user-podman] [user-podman-images] [user-inspector]
#                        [k8s] [k8s-up] [k8s-down]
# k8s installs what the Kubernetes test cluster runs on; k8s-up and k8s-down
# bring it up (building the kube binaries the first time) and tear it down.
# The user* components are for the unprivileged test leg (make test-user):
# they make the test user ($SANDBASH_TEST_USER, sbtest by default) and give
# it what a normal user has: a runtime directory, subordinate ids, the docker
# group, its own rootless Podman service and images; and a second local
# user ($SANDBASH_TEST_OTHER_USER, sbtest2) it may become with sudo.
set -euo pipefail

say() { echo "deps: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else say "need root to run: $*; run it as root or install sudo"; exit 1
  fi
}

test_user=${SANDBASH_TEST_USER:-sbtest}
test_other_user=${SANDBASH_TEST_OTHER_USER:-sbtest2}

# as_user runs a command as the test user, with the environment a login
# session would give it.
as_user() {
  local u=$test_user uid
  uid=$(id -u "$u")
  as_root setpriv --reuid "$u" --regid "$(id -g "$u")" --init-groups --reset-env \
    env XDG_RUNTIME_DIR="/run/user/$uid" PATH="/usr/local/bin:/usr/bin:/bin" "$@"
}

# test_subids picks a free range of 65536 subordinate ids for uid.
test_subids() {
  local start=$((100000 + ($1 % 1000) * 65536))
  echo "$start-$((start + 65535))"
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
      fi
      if ! command -v bwrap >/dev/null || ! command -v prlimit >/dev/null; then
        say "installing bubblewrap and util-linux with apt-get: the test image sandbash-test-bwrap copies bwrap and prlimit"
        apt_install bubblewrap util-linux
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
      for i in base:sandbash-test:latest env:sandbash-test-env:2 go:sandbash-test-go:latest git:sandbash-test-git:2 bwrap:sandbash-test-bwrap:1; do
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
      for i in base:sandbash-test:latest env:sandbash-test-env:2 go:sandbash-test-go:latest git:sandbash-test-git:2 bwrap:sandbash-test-bwrap:1; do
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
        [ ! -x /usr/lib/cni/bridge ] || ! command -v jq >/dev/null || ! command -v openssl >/dev/null || ! command -v curl >/dev/null || ! command -v iptables >/dev/null; then
        say "installing etcd-server, containerd, runc, containernetworking-plugins, jq, openssl, curl and iptables with apt-get: the Kubernetes backend's test cluster"
        apt_install etcd-server containerd runc containernetworking-plugins jq openssl curl iptables
      fi ;;
    k8s-up)
      say "bringing up the test cluster (scripts/k8s.sh up; the first time it builds kube-apiserver, kubelet and kubectl)"
      as_root "$(dirname "$0")/k8s.sh" up >/dev/null ;;
    k8s-down)
      as_root "$(dirname "$0")/k8s.sh" down >/dev/null ;;
    user)
      u=$test_user
      if ! id "$u" >/dev/null 2>&1; then
        say "creating the unprivileged test user $u (make test-user runs the tests as it)"
        as_root useradd --create-home --shell /bin/bash "$u"
      fi
      uid=$(id -u "$u")
      # Rootless Podman maps the user's containers onto subordinate ids.
      for f in subuid subgid; do
        if ! grep -q "^$u:" "/etc/$f" 2>/dev/null; then
          say "giving $u subordinate ${f#sub}s for rootless Podman"
          as_root usermod "--add-${f}s" "$(test_subids "$uid")" "$u"
        fi
      done
      command -v newuidmap >/dev/null || { say "installing uidmap with apt-get: rootless Podman maps ids with newuidmap"; apt_install uidmap; }
      if getent group docker >/dev/null && ! id -nG "$u" | tr ' ' '\n' | grep -qx docker; then
        say "adding $u to the docker group: the tests use Docker as a member of it"
        as_root usermod -aG docker "$u"
      fi
      # What a login session's pam_systemd would make.
      run=/run/user/$uid
      if [ ! -d "$run" ]; then
        as_root install -d -m 0700 -o "$u" -g "$(id -gn "$u")" "$run"
      fi
      # A second local user, the one TestMCPHTTPOtherLocalUser tries the
      # MCP server as; the test user becomes it with sudo, for that only.
      o=$test_other_user
      if ! id "$o" >/dev/null 2>&1; then
        say "creating $o, the other local user the MCP HTTP tests try the server as"
        as_root useradd --create-home --shell /bin/sh "$o"
      fi
      command -v sudo >/dev/null || { say "installing sudo with apt-get: the test user becomes $o with it"; apt_install sudo; }
      rule="$u ALL=($o) NOPASSWD: ALL"
      if ! as_root grep -qxF "$rule" /etc/sudoers.d/sandbash-test 2>/dev/null; then
        say "letting $u run commands as $o with sudo (/etc/sudoers.d/sandbash-test)"
        as_root install -d -m 0750 /etc/sudoers.d
        echo "$rule" | as_root tee /etc/sudoers.d/sandbash-test.new >/dev/null
        as_root chmod 0440 /etc/sudoers.d/sandbash-test.new
        as_root visudo -cqf /etc/sudoers.d/sandbash-test.new
        as_root mv /etc/sudoers.d/sandbash-test.new /etc/sudoers.d/sandbash-test
      fi
      # Pseudo-terminals (the terminal tests run sandbash on one): where
      # /dev/ptmx is a link to a devpts instance's ptmx mounted with
      # ptmxmode=000 (a VM's or container's bare /dev), no user can open
      # one; give it the mode a standard /dev/ptmx has.
      if ! as_user sh -c ': <>/dev/ptmx' 2>/dev/null; then
        p=$(readlink -f /dev/ptmx)
        say "$u cannot open /dev/ptmx ($p is mode $(stat -c %a "$p")): making it 0666 as on a standard host, so users can have pseudo-terminals"
        as_root chmod 0666 "$p"
      fi ;;
    user-podman)
      u=$test_user
      uid=$(id -u "$u")
      sock=/run/user/$uid/podman/podman.sock
      if ! as_user curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
        # vfs: overlayfs in a user namespace needs fuse-overlayfs or a
        # kernel and filesystem that allow it; vfs works everywhere.
        conf=/home/$u/.config/containers/storage.conf
        if ! as_user test -e "$conf"; then
          as_user mkdir -p "$(dirname "$conf")"
          printf '[storage]\ndriver = "vfs"\n' | as_user tee "$conf" >/dev/null
        fi
        say "starting $u's rootless Podman service on $sock (log: /tmp/deps-podman-$u.log)"
        as_root touch "/tmp/deps-podman-$u.log"
        as_root chown "$u" "/tmp/deps-podman-$u.log"
        as_user mkdir -p "$(dirname "$sock")"
        # The shell around it logs how the service ended (128+N: signal N),
        # so that a service that dies mid-suite leaves its reason.
        as_user sh -c "cd && nohup sh -c 'podman system service --time=0 unix://$sock; echo \"deps: the Podman service exited with status \$? at \$(date -u +%T)\"' >>/tmp/deps-podman-$u.log 2>&1 &"
        for _ in $(seq 1 60); do as_user curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && break; sleep 0.5; done
        as_user curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 || { say "$u's Podman service did not answer in 30 s; see /tmp/deps-podman-$u.log"; exit 1; }
      fi ;;
    user-podman-images)
      u=$test_user
      missing=
      for i in base:sandbash-test:latest env:sandbash-test-env:2 go:sandbash-test-go:latest git:sandbash-test-git:2; do
        as_user podman image exists "localhost/${i#*:}" || missing="$missing ${i%%:*}"
      done
      if [ -n "$missing" ]; then
        say "building the missing test images ($missing ) into $u's rootless podman (scripts/images.sh)"
        as_user env IMAGES="$missing" "$(cd "$(dirname "$0")" && pwd)/images.sh" podman
      fi ;;
    user-inspector)
      # The MCP tests look for the inspector in the user's own cache.
      u=$test_user
      src="${XDG_CACHE_HOME:-$HOME/.cache}/sandbash/inspector"
      dst=/home/$u/.cache/sandbash/inspector
      if ! as_user test -x "$dst/node_modules/.bin/mcp-inspector"; then
        say "copying the MCP inspector into $u's cache ($dst)"
        as_root mkdir -p "$(dirname "$dst")"
        as_root cp -a "$src" "$dst"
        as_root chown -R "$u:$(id -gn "$u")" "/home/$u/.cache"
      fi ;;
    *) say "unknown component $want"; exit 2 ;;
  esac
done
