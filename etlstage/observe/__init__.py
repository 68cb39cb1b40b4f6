"""Watching a run: the live state, ``etlstage status``, Prometheus ``/metrics`` and the status page.

``document.py`` declares the status document both engines fill (types only, below both
engines in the layers); ``live.py`` reads a running supervisor's counters (on its event
loop, never on the message path); ``status.py`` turns them, with the state store, into
the document ``etlstage status --json`` prints and ``/api/status`` serves; ``metrics.py``
exposes the same in Prometheus form; ``server.py`` serves all of it, and the page in
``page/``, over HTTP.
"""
