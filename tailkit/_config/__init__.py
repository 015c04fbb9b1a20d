"""
Implementation of `tailkit.config`: the plan model, its YAML reader, validator and writer.
"""
