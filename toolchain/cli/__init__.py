"""Thin Typer layer: parse flags, call one library function, render the result."""
