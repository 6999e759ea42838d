"""llama.cpp's token sampling (src/llama-sampler.cpp, common/sampling.cpp) with its random engine."""

import kernels.config  # noqa: F401  (sets NUMBA_CACHE_DIR before numba is imported: the jitted samplers' cache
                       # goes to .cache/numba with the kernels', not to a __pycache__ a kernel-cache clear misses)
from .chain import DEFAULT_SAMPLERS, CommonSampler, SamplingParams, samplers_from_chars, samplers_from_names

__all__ = ["CommonSampler", "SamplingParams", "DEFAULT_SAMPLERS", "samplers_from_names", "samplers_from_chars"]
