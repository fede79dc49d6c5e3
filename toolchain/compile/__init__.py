"""trtllm-build synthesis and execution, LLM-API profiles, provenance, registry integration."""
