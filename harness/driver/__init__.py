"""The driver core every executor subclasses (``core.Driver``), the checkpoint coordinator, the
restore planning and restart budget (``jobmaster``), the control messages between driver and tasks
(``messages``), and the contract with the chaos layer (``controls``)."""
