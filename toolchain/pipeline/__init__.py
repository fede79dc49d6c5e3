"""Whole-pipeline orchestration (`toolchain up`) and the CI engine matrix (`toolchain matrix`)."""
