"""Helpers for running Triton kernels: interpreter fixes and switches."""
