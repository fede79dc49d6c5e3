"""Test stand-in: only the version string the toolchain probes."""

__version__ = "10.14.1.48"
