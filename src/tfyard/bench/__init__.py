"""`tfyard bench`: throughput of the real training loop, the input pipeline, and scaling.

Every figure is a median over timed windows after a warm-up, so one slow window (tracing,
a neighbour's burst on a shared machine) does not move it.
"""
