"""Benchmarks: each script measures one goal against a baseline taken in the same run."""
