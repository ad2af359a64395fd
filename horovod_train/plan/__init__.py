"""Cluster planner: predict memory, step time and scaling efficiency before renting.

TF-free and Horovod-free: it runs on a laptop. Entry point: cli.main(argv).
Modules: hardware (GPU and link tables), models (descriptors), cost (memory, compute,
step), comm (allreduce), recommend, calibrate, report. See docs/planning.md.
"""
