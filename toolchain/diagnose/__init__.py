"""Diagnosis rules (docs/diagnose.md): metrics and bench results -> findings with evidence and actions."""
