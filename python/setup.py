# Everything is in setup.cfg; this file lets Debian's pip (23.0) build without network access.
# It also keeps the build out of the source tree: `pip install ./python` and `pip wheel ./python`
# build in a temporary folder (setuptools' build/ and *.egg-info would otherwise land in python/).
import atexit
import shutil
import tempfile

from setuptools import setup

_out = tempfile.mkdtemp(prefix="zeropipe-build-")
atexit.register(shutil.rmtree, _out, ignore_errors=True)
setup(options={"build": {"build_base": _out}, "egg_info": {"egg_base": _out}})
