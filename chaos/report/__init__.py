"""The front ends: the ``statechaos`` command line, the pytest plugin, and what they report (the run
summary, JSON, Allure results, timelines). The product core (:mod:`chaos`) never imports them."""
