#!/usr/bin/env bash
# buf breaking: every commit since the contracts baseline (.ci/contracts-baseline) that
# touched protos/ is checked against its parent, and the working tree against HEAD, so
# no change to the contracts after the baseline ever breaks a client.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-$HOME/go/bin/buf}
baseline=$(cat .ci/contracts-baseline 2>/dev/null || true)
if [ -z "$baseline" ] || ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
  echo "buf breaking: no contracts baseline in this clone; checking the working tree against HEAD only"
  commits=""
else
  commits=$(git rev-list --reverse "$baseline..HEAD" -- protos)
fi
checked=0
for c in $commits; do
  # buf clones the repository shallowly (50 commits by default): deep enough to reach c's parent.
  depth=$(( $(git rev-list --count "$c..HEAD") + 2 ))
  tmp=$(mktemp -d)
  git archive "$c" protos buf.yaml | tar -x -C "$tmp"
  (cd "$tmp" && "$BUF" breaking . --against "$OLDPWD/.git#ref=$c~1,depth=$depth") || { echo "commit $c breaks the contracts"; exit 1; }
  rm -rf "$tmp"
  checked=$((checked + 1))
done
"$BUF" breaking . --against ".git#ref=HEAD"
echo "buf breaking: $checked commit(s) since the baseline and the working tree add without breaking"
