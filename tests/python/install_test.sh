#!/usr/bin/env bash
# `pip install ./python` works offline with Debian's packages: a venv that sees the system's
# site-packages (python3-grpcio, python3-protobuf, python3-yaml), pip with --no-index (no network
# at all), then the client imported from outside the source tree. A copy of python/ is installed
# so the build leaves nothing in the checkout. ctest: python_client_install.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=$("$root/scripts/find-python" grpc google.protobuf yaml)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/python" "$tmp/src"
"$py" -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --no-index "$tmp/src"
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
