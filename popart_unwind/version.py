"""The installed package's version, as its metadata (pyproject.toml) states it: one source."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("popart-unwind")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
