"""Answering questions at scale, under the notebook steps and over the methods: the resumable
runner (`runner`), the grid of (method, data set) runs (`grid`), the one loaded backend (`pool`),
the local and Ray engines (`engine`, `ray_worker`), what the runs read of steps 00-01 (`inputs`),
and the planning of a profile's work before it runs (`plan`: question counts; `cost`: hours;
`disk_needs`: bytes). Nothing here imports a notebook step: what a step owns is handed in."""
