"""
Implementation of `tailkit.config`: the plan model, its YAML reader, validator and writer.

`tailkit.config` re-exports the public names; other packages import them from there.
"""
