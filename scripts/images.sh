#!/usr/bin/env bash
# Builds the local test images from Debian's bash-static and busybox-static
# (no registry is needed or used), and imports them into each engine named:
#   scripts/images.sh docker podman
# Images (IMAGES="base env go" by default picks which to build):
#   sandbash-test:latest     bash + busybox: enough for the conformance suite
#   sandbash-test-env:2      the same, with an ENV of its own and passwd/group
#                            entries that put uid 4242 (the suite's workspace
#                            owner) in an extra group: for the tests that show
#                            neither enters a call
#   sandbash-test-go:latest  the same as the first plus the host's Go toolchain
#                            (/usr/local/go)
#   sandbash-test-git:2      the same as the first plus git and curl, the host's
#                            (Debian's, scripts/deps.sh installs them) with the
#                            libraries they link: for the linked-worktree tests
#                            and the egress tests' HTTPS client
#   sandbash-test-bwrap:1    the same as the first plus the host's bwrap and
#                            prlimit with their libraries: sandbash's bwrap
#                            backend has what it needs but user namespaces, for
#                            the tests that run sandbash in a container
set -euo pipefail

images=" ${IMAGES:-base env go git bwrap} "

for f in /bin/bash-static /bin/busybox; do
  if [ ! -x "$f" ]; then
    echo "images: $f is missing; install bash-static and busybox-static (scripts/deps.sh images)" >&2
    exit 1
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"/{bin,etc,tmp,root,home,usr/bin,usr/local}
chmod 1777 "$root/tmp"
cp /bin/bash-static "$root/bin/bash"
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  case "$applet" in bash|busybox) continue ;; esac
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
ln -s ../../bin/env "$root/usr/bin/env"
passwd='root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n'
group='root:x:0:\nnogroup:x:65534:\n'
printf "$passwd" > "$root/etc/passwd"
printf "$group" > "$root/etc/group"

# withbins copies programs (absolute paths) into the root directory dir
# under /usr/bin, with their libraries and loader at the paths they were
# linked with.
withbins() { # dir program...
  local dir=$1 lib
  shift
  for p in "$@"; do cp -L "$p" "$dir/usr/bin/$(basename "$p")"; done
  for lib in $(for p in "$@"; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
    mkdir -p "$dir$(dirname "$lib")"
    cp -L "$lib" "$dir$lib"
  done
}

import() { # engine name dir [--change ...]
  local engine=$1 name=$2 dir=$3
  shift 3
  local quiet=()
  [ "$engine" = podman ] && quiet=(--quiet)
  tar -C "$dir" -c . | "$engine" import "${quiet[@]}" --change 'CMD ["bash"]' "$@" - "$name" >/dev/null
  echo "images: $engine: built $name" >&2
}

if [[ $images == *" base "* ]]; then
  for engine in "$@"; do
    import "$engine" sandbash-test:latest "$root"
  done
fi

if [[ $images == *" env "* ]]; then
  printf "${passwd}sbuser:x:4242:4242:sandbash test user:/home/sbuser:/bin/bash\n" > "$root/etc/passwd"
  printf "${group}sbuser:x:4242:\nsbextra:x:4343:sbuser\n" > "$root/etc/group"
  for engine in "$@"; do
    import "$engine" sandbash-test-env:2 "$root" \
      --change 'ENV PATH=/opt/imagetools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV SANDBASH_IMAGE_CANARY=leak' \
      --change 'ENV BASH_ENV=/tmp/sandbash-poison' \
      --change 'ENV ENV=/tmp/sandbash-poison'
  done
  printf "$passwd" > "$root/etc/passwd"
  printf "$group" > "$root/etc/group"
fi

if [[ $images == *" git "* ]]; then
  gitbin=$(command -v git || true)
  if [ -z "$gitbin" ]; then
    echo "images: no git here; install it (scripts/deps.sh bwrap) to build sandbash-test-git" >&2
    exit 1
  fi
  curlbin=$(command -v curl || true)
  if [ -z "$curlbin" ]; then
    echo "images: no curl here; install it (scripts/deps.sh images) to build sandbash-test-git" >&2
    exit 1
  fi
  gitroot="$work/gitroot"
  cp -a "$root" "$gitroot"
  withbins "$gitroot" "$gitbin" "$curlbin"
  for engine in "$@"; do
    import "$engine" sandbash-test-git:2 "$gitroot"
  done
fi

if [[ $images == *" bwrap "* ]]; then
  bins=()
  for b in bwrap prlimit; do
    p=$(command -v "$b" || true)
    if [ -z "$p" ]; then
      echo "images: no $b here; install it (scripts/deps.sh images) to build sandbash-test-bwrap" >&2
      exit 1
    fi
    bins+=("$p")
  done
  bwraproot="$work/bwraproot"
  cp -a "$root" "$bwraproot"
  withbins "$bwraproot" "${bins[@]}"
  for engine in "$@"; do
    import "$engine" sandbash-test-bwrap:1 "$bwraproot"
  done
fi

if [[ $images == *" go "* ]]; then
  if [ -d /usr/local/go ]; then
    cp -a /usr/local/go "$root/usr/local/go"
    for t in go gofmt; do ln -s ../local/go/bin/$t "$root/usr/bin/$t"; done
    for engine in "$@"; do
      import "$engine" sandbash-test-go:latest "$root"
    done
  else
    echo "images: no /usr/local/go here; skipping sandbash-test-go" >&2
  fi
fi
