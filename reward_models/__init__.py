"""Preference-disentangled reward models (stage 1 profile encoder, stage 2 interest/conformity).

Reads canonical datasets from ``data_pipelines``; published to the registry.
"""
