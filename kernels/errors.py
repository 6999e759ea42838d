"""Domain errors. Library code raises these; each CLI command turns them into one stderr line."""


class SynapseError(Exception):
    """Base of every error a user can cause with bad input (a file, a flag, a model)."""


class GGUFError(SynapseError):
    """A GGUF file is malformed, truncated, hostile or of a kind we do not read."""


class ModelError(SynapseError):
    """A GGUF file is well formed but describes a model synapse cannot run (arch, tensor, type)."""
