"""Pictures of overlays and experiment results (matplotlib, the `plots` extra); no daemon part imports this."""
