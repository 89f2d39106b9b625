"""Floor 1: settings, shared pydantic models, identities and versions, telemetry.

Nothing here imports any other ragstream package.
"""
