"""Triton model repositories: emission (protobuf ModelConfig), lint, server launch."""
