"""Overlay controller: node ids, Symphony link selection, adjacency orchestration."""
