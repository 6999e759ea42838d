"""llama.cpp's token sampling (src/llama-sampler.cpp, common/sampling.cpp) with its random engine."""

from .chain import DEFAULT_SAMPLERS, CommonSampler, SamplingParams, samplers_from_chars, samplers_from_names

__all__ = ["CommonSampler", "SamplingParams", "DEFAULT_SAMPLERS", "samplers_from_names", "samplers_from_chars"]
