"""Assertions on what a command printed."""


def assert_one_line_exit_2(result, *words: str) -> str:
    """A refusal as the project promises it: exit status 2 and one line on stderr, ``maxbench: error: ...``
    with no traceback, holding each of ``words``. ``result`` is ``(exit status, stdout, stderr)``, as the
    ``cli`` fixture returns it; gives stderr back for further checks."""
    rc, _, err = result
    assert rc == 2, err
    assert err.startswith("maxbench: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err
