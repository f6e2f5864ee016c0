# Everything is in setup.cfg; this file lets Debian's pip (23.0) build without network access.
from setuptools import setup

setup()
