"""Rules from the P99-TTFT cookbook: metrics and bench results -> findings with evidence and actions."""
