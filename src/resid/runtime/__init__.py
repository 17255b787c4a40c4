"""What every layer shares: where files live (``paths``), progress bars (``progress``) and the
provenance of what a run read, built and measured (``provenance``). It imports no other layer.
"""
