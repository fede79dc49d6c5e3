"""Model arithmetic: weights, KV cache, memory fit, TPOT floor, TTFT estimate, fleet size."""
