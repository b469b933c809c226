"""`python -m bertjax.bench`: names the benchmarks (this package's docstring)."""

import bertjax.bench

print(bertjax.bench.__doc__)
