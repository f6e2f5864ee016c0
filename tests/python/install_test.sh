#!/usr/bin/env bash
# `pip install ./python` works offline and leaves the source tree as it was: a fresh venv that sees
# the project venv's packages (grpcio, protobuf, PyYAML, through a .pth file, as a user's
# environment would have them), pip with --no-index (no network at all), installed straight from
# the checkout's python/, then `git status` of python/ (ignored files included) compared with
# before; the client imported from outside the source tree. Then the wheel scripts/build-wheel
# makes, installed into a second venv. ctest: python_client_install.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=$("$root/scripts/find-python" grpc google.protobuf yaml)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tree_state() { git -C "$root" status --porcelain --ignored -- python; }
before=$(tree_state)
deps=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
new_venv() {  # new_venv DIR: a venv that also sees the project venv's packages
  "$py" -m venv "$1"
  "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' |
    { read -r site; echo "$deps" >"$site/zpipe-project-venv.pth"; }
}
new_venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$root/python"
after=$(tree_state)
if [[ $after != "$before" ]]; then
  echo "install_test: pip install ./python changed the source tree:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import zeropipe
assert zeropipe.__file__.startswith(__import__("sys").prefix), zeropipe.__file__
from zeropipe import Client, ZeroPipeError, load_spec
from zeropipe._proto import coordinator_pb2_grpc
spec = load_spec({"name": "x", "parallel": {"pipeline": 2}})
assert spec.parallel.pipeline == 2
try:
    load_spec({"nme": "x"})
except ZeroPipeError as e:
    assert e.field == "spec.nme", e.field
else:
    raise AssertionError("no error")
import sys
assert "torch" not in sys.modules, "the client must not need torch"
print("install_test: zeropipe installed and imported from", zeropipe.__file__)
PY

# The wheel scripts/build-wheel makes installs and imports the same way.
wheel=$("$root/scripts/build-wheel" "$tmp/dist")
new_venv "$tmp/venv2"
"$tmp/venv2/bin/python" -m pip install --quiet --no-index --no-deps "$wheel"
(cd "$tmp" && "$tmp/venv2/bin/python" -c 'import zeropipe, sys; assert zeropipe.__file__.startswith(sys.prefix); print("install_test: wheel", zeropipe.__file__)')
[[ $(tree_state) == "$before" ]] || { echo "install_test: build-wheel changed the source tree" >&2; exit 1; }
