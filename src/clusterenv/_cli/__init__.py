"""CLI verbs, one module each (see :mod:`clusterenv.cli`)."""
