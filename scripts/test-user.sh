#!/usr/bin/env bash
# The unprivileged test leg (make test-user): builds the test binaries as
# root, then runs the conformance suite of every backend and the CLI/MCP
# end-to-end tests as the test user ($SANDBASH_TEST_USER, sbtest by
# default; scripts/deps.sh user* sets it up): bwrap in unprivileged user
# namespaces, Docker as a member of the docker group, and the user's own
# rootless Podman service. Extra arguments go to every test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "test-user: $*" >&2; }
if [ "$(id -u)" != 0 ]; then
  say "run this as root: it builds the tests as root and runs them as the test user"
  exit 1
fi
GO=${GO:-go}
TAGS=${TAGS:-containers_image_openpgp,exclude_graphdriver_btrfs}
u=${SANDBASH_TEST_USER:-sbtest}
uid=$(id -u "$u")
if ! setpriv --reuid "$u" --regid "$(id -g "$u")" --init-groups test -r Makefile; then
  say "$u cannot read this checkout ($(pwd)); the tests run in it: make its directories traversable (chmod o+x) or check it out elsewhere"
  exit 1
fi

dir=$(mktemp -d /tmp/sbtest-user-XXXXXX)
sub=$dir/submount/sub
trap 'umount "$sub" 2>/dev/null; rm -rf "$dir"' EXIT
chmod 755 "$dir"
# Only root mounts: the suite's submount test, run as the user, gets a
# workspace of the user's with a tmpfs over a covered file (SubmountEnv).
mkdir -p "$sub"
echo "hidden on the host" > "$sub/covered"
chown -R "$u:$(id -g "$u")" "$dir/submount"
mount -t tmpfs -o "size=1m,mode=0755,uid=$uid,gid=$(id -g "$u")" tmpfs "$sub"
echo "on the submount" > "$sub/mounted"
chown "$u:$(id -g "$u")" "$sub/mounted"
# The user's rootless Podman works in the mount namespace of its pause
# process, which sees the host's later mounts only where / is a shared
# mount (systemd makes it one). Where it is private, the submount above is
# missing there: stop the service and the pause process, and the service
# (started again below) makes them anew, with the submount.
pause=$(cat "/run/user/$uid/libpod/tmp/pause.pid" 2>/dev/null || true)
if [ -n "$pause" ] && [ -e "/proc/$pause" ] && ! grep -qF " $sub " "/proc/$pause/mountinfo"; then
  say "$u's Podman namespace does not see mounts made after it (/ is not a shared mount here): restarting $u's Podman service"
  pids="$pause"
  for d in /proc/[0-9]*; do
    [ "$(stat -c %u "$d" 2>/dev/null)" = "$uid" ] || continue
    case "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in "podman system service "*) pids="$pids ${d#/proc/}" ;; esac
  done
  kill $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive=
    for p in $pids; do [ -e "/proc/$p" ] && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.2
  done
fi
pkgs=(backend/bwrap backend/docker backend/podman integration)
say "building sandbash and the test binaries of ${pkgs[*]}"
$GO build -tags "$TAGS" -o "$dir/sandbash" ./cmd/sandbash
$GO build -tags "$TAGS,sandbash_kubernetes" -o "$dir/sandbash-kubernetes" ./cmd/sandbash
for p in "${pkgs[@]}"; do
  name=$(echo "$p" | tr / -)
  $GO test -c -race -tags "$TAGS" -o "$dir/$name.test" "./$p"
done

# Tests that run in the root leg only, not selected here (so not SKIPped):
# TestInsideDevcontainer hands the workspace to another uid (chown) and
# gives a container root's engine socket; TestSessionOtherOwnerPrivateState
# is root running sandbash for another user's workspace;
# TestBwrapBlockedInContainer does what TestInsideDevcontainer does;
# TestEgressDecoysHideNothing needs egress rules, which need root (as a
# user, TestEgressDeniedReported checks their refusal); TestKubernetesCLI
# and TestKubernetesInPod need the test cluster, which make test takes down
# after the root leg;
# TestBornInCallCgroups makes cgroups, and TestEtcCopies runs a call as
# another user than the files'. A user can do none of them. Nor, for the
# same reason as TestKubernetesCLI, the kubernetes subtests of the
# CLI/MCP tests (forAgentBackends in integration/container_test.go): the
# part after "|" skips subtests named kubernetes of any test. (It must
# stay after the top-level list: go test takes the first alternative that
# matches, and this one matches every top-level test partially.)
rootonly='^(TestInsideDevcontainer|TestSessionOtherOwnerPrivateState|TestBwrapBlockedInContainer|TestEgressDecoysHideNothing|TestKubernetesCLI|TestKubernetesInPod|TestBornInCallCgroups|TestEtcCopies)$|/^kubernetes$'

status=0
for p in "${pkgs[@]}"; do
  name=$(echo "$p" | tr / -)
  # The user's Podman service again, should something have stopped it
  # (another run's engine-death tests on a shared machine).
  scripts/deps.sh user-podman
  start=$(date +%s)
  if (cd "$p" && setpriv --reuid "$u" --regid "$(id -g "$u")" --init-groups --reset-env \
      env XDG_RUNTIME_DIR="/run/user/$uid" PATH="$(dirname "$(command -v "$GO")"):/usr/local/bin:/usr/bin:/bin" \
        SANDBASH_REQUIRE="${SANDBASH_REQUIRE:-bwrap,docker,podman,inspector}" SANDBASH_TEST_BINARY="$dir/sandbash" SANDBASH_TEST_SUBMOUNT="$dir/submount" \
        SANDBASH_TEST_OTHER_USER="${SANDBASH_TEST_OTHER_USER:-sbtest2}" \
        "$dir/$name.test" -test.count=1 -test.skip "$rootonly" "$@"); then
    echo "ok   $p as $u $(($(date +%s) - start))s"
  else
    echo "FAIL $p as $u $(($(date +%s) - start))s"
    status=1
  fi
  if ! setpriv --reuid "$u" --regid "$(id -g "$u")" --init-groups curl -fsS --unix-socket "/run/user/$uid/podman/podman.sock" http://d/_ping >/dev/null 2>&1; then
    say "$u's Podman service stopped answering during $p; how it ended (/tmp/deps-podman-$u.log):"
    grep -E -A 12 '^(panic|fatal error|SIGSEGV|unexpected signal)' "/tmp/deps-podman-$u.log" | head -n 40 >&2 || true
    tail -n 3 "/tmp/deps-podman-$u.log" >&2 || true
  fi
done
exit $status
