"""The Python API: the platform's jobs as functions, for scripts and notebooks (the top layer,
beside ``parpo.cli``; both may use every package below, ``serving`` included).

- ``parpo.api.demo.demo_steps``: the end-to-end demo as a stream of steps and their results.
"""
