"""The one error type that the command line turns into a one-line message and exit code 2."""


class MaxbenchError(Exception):
    """A problem the user can fix: bad input, a missing resource, a mismatched cache.

    The message must say what is wrong and what to do; the CLI prints it on one line
    (``maxbench: error: ...``) and exits with status 2, never with a traceback.
    """

    exit_code = 2
