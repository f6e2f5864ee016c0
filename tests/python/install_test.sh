#!/usr/bin/env bash
# `pip install ./python` works offline: a fresh venv that sees the project venv's packages (grpcio,
# protobuf, PyYAML, through a .pth file, as a user's environment would have them), pip with
# --no-index (no network at all), then the client imported from outside the source tree. A copy of
# python/ is installed so the build leaves nothing in the checkout. ctest: python_client_install.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=$("$root/scripts/find-python" grpc google.protobuf yaml)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/python" "$tmp/src"
"$py" -m venv "$tmp/venv"
deps=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' |
  { read -r site; echo "$deps" >"$site/zpipe-project-venv.pth"; }
"$tmp/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$tmp/src"
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
