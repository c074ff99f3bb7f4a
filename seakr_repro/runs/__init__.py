"""Answering questions at scale, under the notebook steps and over the methods: the resumable
runner (`runner`), the grid of (method, data set) runs (`grid`), the one loaded backend (`pool`),
the choice of engine and its opening (`engine_choice`, `engine`), the Ray engine (`fleet`: the
driver; `fleet_backend`: its stand-ins for a model, a method, a pool; `ray_worker`: a worker;
`ray_cluster`: the cluster; `worker_plan`: how many workers, with what; `workers_status`:
workers.json), what the runs read of steps 00-01 (`inputs`), and the planning of a profile's work
before it runs (`plan`: question counts; `cost`: hours; `disk_needs`: bytes; `preflight`: whether
everything it needs is in place). Nothing here imports a notebook step: what a step owns is handed
in."""
