"""The fault-free reference a run is judged against: the job run sequentially at parallelism 1
(``run``), its results cached by job and input (``cache``)."""
