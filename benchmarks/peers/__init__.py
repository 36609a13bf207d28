"""Peer libraries of the benchmarks (each in its own venv; see plaid_venv.py)."""
