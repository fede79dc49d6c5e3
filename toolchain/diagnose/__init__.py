"""Rules from the seed cookbook: metrics and bench results -> findings with evidence and actions."""
