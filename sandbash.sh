#!/usr/bin/env bash
# Runs sandbash from this checkout: installs bubblewrap if it is missing
# (saying so), builds bin/sandbash when the sources changed, then runs it.
#   ./sandbash.sh run -- 'echo hello from the sandbox; id'
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$here/scripts/deps.sh" bwrap
if ! command -v go >/dev/null; then
  [ -x /usr/local/go/bin/go ] && PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null; then
  echo "sandbash.sh: building sandbash needs Go 1.25 or later; install it (https://go.dev/doc/install) and run this again" >&2
  exit 125
fi
bin="$here/bin/sandbash"
if [ ! -x "$bin" ] || [ -n "$(find "$here" -name '*.go' -newer "$bin" -print -quit)" ] || [ "$here/go.mod" -nt "$bin" ]; then
  echo "sandbash.sh: building bin/sandbash" >&2
  (cd "$here" && go build -o bin/sandbash ./cmd/sandbash)
fi
exec "$bin" "$@"
