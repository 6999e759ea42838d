"""`python -m synapse_cli` is the `synapse` command."""

from .cli import main

main()
