"""What is trained: the task (model, data and objective of a run), a user's own model and
input functions, the input pipelines, the objectives and the recipes the model families were
published with."""
