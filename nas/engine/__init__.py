"""The engine: the search loop (the only place that knows concurrency) and the executors behind one Protocol."""
