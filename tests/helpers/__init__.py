"""What several test modules share, defined once, one module per subject.
A helper is imported from its module (``from tests.helpers.calls import
call``); this package's ``__init__`` defines and re-exports nothing.

* ``calls``: building calls, tools, views and registries, reading results.
* ``recorders``: recording hooks, bodies, progress and call watches.
* ``waiting``: waiting without sleeping, in threads of the test.
* ``interleavings``: races in lockstep and interrupts at every point.
* ``processes``: child processes, their signals and descendants.
* ``workers``: bodies a worker process runs, imported by reference.
* ``faults``: skipped calls and objects that cannot be printed.
* ``cycles``: objects left on reference cycles.
* ``providers``: a provider API served on 127.0.0.1.
* ``ray_events``: the Ray actor the remote bodies report to.
* ``journals``: journals named by a spec, and the test PostgreSQL server.

Each module imports only ``dshtools``, the standard library and other
helper modules at import time (psutil, ray and the SDKs inside the
functions that need them). Fixtures live in the ``conftest.py`` of the
folder that uses them; see
docs/decisions/0121-test-helpers-split-by-subject.md.
"""
