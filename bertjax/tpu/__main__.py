"""`python -m bertjax.tpu`: names the Cloud TPU programs (this package's docstring)."""

import bertjax.tpu

print(bertjax.tpu.__doc__)
