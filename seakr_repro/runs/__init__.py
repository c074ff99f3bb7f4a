"""Answering questions at scale, under the notebook steps and over the methods: the resumable
runner, the run grid, the backend pool, the engines (local and Ray) and the planning of a
profile's work before it runs; docs/layout.md says which module holds what. Nothing here imports a
notebook step: what a step owns is handed in."""
