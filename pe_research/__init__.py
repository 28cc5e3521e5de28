"""pe_research: positional encodings and length extrapolation in JAX/Flax NNX."""
