"""The one error type users see: a message and an exit status, never a traceback."""


class TpumemError(Exception):
    """An error the user can act on; the CLI prints its message on one line."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
