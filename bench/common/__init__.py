"""What the benchmarks, sweeps and demos share, imported as `bench.common.<module>`."""
