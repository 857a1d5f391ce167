"""The benchmarks (``python benchmarks/NAME.py --help``) and their shared harness; not shipped."""
