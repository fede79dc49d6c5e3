"""ModelOpt calibration and export: TRT-LLM checkpoint and unified HF checkpoint."""
