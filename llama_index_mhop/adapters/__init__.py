"""The narrow seams to third-party libraries' less stable names, one module per library."""
