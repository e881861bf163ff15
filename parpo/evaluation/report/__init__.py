"""Offline HTML report and markdown summary of policy versions (``parpo eval report``)."""

from parpo.evaluation.report.build import write_report

__all__ = ["write_report"]
