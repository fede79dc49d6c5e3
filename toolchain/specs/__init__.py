"""Engine specs: the YAML models, their loader, matrix expansion and the compatibility rules."""
