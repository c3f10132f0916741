"""`tfyard tune`: a hyperparameter search over ordinary `tfyard train` runs.

A study is a set of runs (`DIR/trials/NNNN`) plus its record in Optuna's storage; the
samplers and pruners are Optuna's, the trials are train processes this room starts, watches
and stops. It sits above `train` (it drives runs) and `launch` (whose process groups it
reuses), and imports Optuna only when a search runs.
"""
