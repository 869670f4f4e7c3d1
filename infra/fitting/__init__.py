"""Offline calibration tooling: replaying measured rows through the model and the statistics over them.
Only the benchmarks and tests import it; the product itself never does."""
