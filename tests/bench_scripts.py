"""The benchmark scripts that take options, each with a `build_parser` (tests/benchmarks/test_bench_option_spelling.py
checks that the list is every benchmarks/*.py that adds an argument)."""

BENCHES = (
    "bench_automaton_step",
    "bench_compile",
    "bench_deer",
    "bench_hybrid",
    "bench_kernels",
    "bench_lm",
    "bench_lru",
    "bench_pd",
    "bench_scaling",
    "bench_scan",
)
