"""The compute dtypes tfyard trains in (`--dtype`), declared once for the options, the input
pipeline and the models; `tfyard.models.factory.policy_name` maps each to its Keras policy.
No imports: any layer may use it."""

DTYPES = ("float32", "bfloat16", "float16")
