"""One module per topic of a report; each exposes ``section``, ``TOPIC``, ``PLOTS`` and
``HEADLINE``."""
