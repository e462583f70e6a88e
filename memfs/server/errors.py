"""API errors as the wire shows them: an HTTP status, an `error.type` and a message.

Storage raises these directly so that a rule (say, the precondition check order) lives in
one place and the HTTP layer only renders the envelope of spec §6.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """One error response; `extra` lands inside the `error` object (e.g. conflict fields)."""

    def __init__(self, status: int, error_type: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.extra = extra

    def body(self, request_id: str) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.error_type, "message": self.message}
        error.update(self.extra)
        return {"type": "error", "error": error, "request_id": request_id}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "authentication_error", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found_error", message)


def conflict(message: str) -> ApiError:
    return ApiError(409, "conflict_error", message)


def precondition_failed(message: str) -> ApiError:
    return ApiError(409, "memory_precondition_failed_error", message)


def path_conflict(message: str, memory_id: str, path: str) -> ApiError:
    return ApiError(
        409,
        "memory_path_conflict_error",
        message,
        conflicting_memory_id=memory_id,
        conflicting_path=path,
    )


def too_large(message: str) -> ApiError:
    return ApiError(413, "request_too_large", message)


def internal(message: str = "internal server error") -> ApiError:
    return ApiError(500, "api_error", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "permission_error", message)
