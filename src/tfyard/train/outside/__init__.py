"""The run's ties to what lies outside its process: signals in (`preemption`), lines on the
terminal (`console`), and its twin in an experiment tracker (`tracked`)."""
