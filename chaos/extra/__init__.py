"""Separate products shipped beside statechaos, as Hypothesis keeps its extras: a Toxiproxy-compatible
server (:mod:`.toxiproxy`, started as its own program when no other server is at hand) and the
benchmarks (:mod:`.bench`, ``statechaos bench``). Nothing in the product core imports them."""
