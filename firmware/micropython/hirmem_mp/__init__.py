"""hirmem device agent for MicroPython (protocol version 1, protocol/SPEC.md)."""

VERSION = "0.1.0"
