"""OpenAPI descriptions of the error answers the routes share."""

from __future__ import annotations

from typing import Any

from serving.schemas import ErrorBody

ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorBody, "description": "body too large"},
    503: {"model": ErrorBody, "description": "no model loaded yet, or the model call failed"},
}
