"""What an ``--include`` file does while it is imported: a script that exits is refused by name (not a
silent exit 0), its prints go to standard error so that a command's standard output (``plugins --json``)
stays valid, and a registration made by a sibling module it imports records the sibling's file as its
origin, not the included file's."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from tests.support.cli import assert_one_line_exit_2

pytestmark = pytest.mark.usefixtures("no_plugins")

LAYER = """
import maxbench
from maxbench.systems.layers.base import OutputLayer


class {cls}(OutputLayer):
    name = "{name}"

    def scores(self, logits, hidden):
        return logits


maxbench.register_layer({cls})
"""


@pytest.mark.parametrize("code", ["0", "None", "'done'", "3"])
def test_an_included_script_that_exits_while_imported_is_refused_by_name(cli, tmp_path, code):
    script = tmp_path / "script.py"
    script.write_text(f"import sys\n\nsys.exit({code})\n")
    err = assert_one_line_exit_2(cli("plugins", "--include", script), str(script), "exited while being imported")
    assert f"sys.exit({eval(code)!r})" in err


def test_an_included_file_exiting_under_main_guard_is_a_plugin_like_any_other(cli, tmp_path):
    plugin = tmp_path / "guarded.py"
    plugin.write_text(
        LAYER.format(cls="Guarded", name="guarded") + "\nif __name__ == '__main__':\n    raise SystemExit(0)\n"
    )
    rc, out, err = cli("plugins", "--include", plugin, "--json")
    assert rc == 0, err
    assert "guarded" in json.loads(out)["maxbench.layers"]


def test_plugins_json_stays_valid_when_a_plugin_prints_on_import(cli, tmp_path):
    plugin = tmp_path / "loud.py"
    plugin.write_text("print('loading the loud plugin')\n" + LAYER.format(cls="Loud", name="loud"))
    rc, out, err = cli("plugins", "--include", plugin, "--json")
    assert rc == 0, err
    assert "loud" in json.loads(out)["maxbench.layers"]
    assert "loading the loud plugin" in err  # said, on standard error


def test_a_registration_by_a_sibling_module_records_the_sibling_file_as_its_origin(cli, tmp_path, monkeypatch):
    folder = tmp_path / "plugin"
    folder.mkdir()
    sibling = folder / "sibling_registers_49.py"
    sibling.write_text(LAYER.format(cls="Sib", name="sib"))
    main = folder / "main.py"
    main.write_text(
        "import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).parent))\n"
        "import sibling_registers_49  # noqa: E402,F401\n"
    )
    monkeypatch.delitem(sys.modules, "sibling_registers_49", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    rc, out, err = cli("plugins", "--include", main, "--json")
    assert rc == 0, err
    origin = json.loads(out)["maxbench.layers"]["sib"]
    assert origin == {
        "source": "file",
        "path": str(sibling.resolve()),
        "sha256": hashlib.sha256(sibling.read_bytes()).hexdigest(),
    }
    sys.modules.pop("sibling_registers_49", None)


def test_a_sibling_registered_class_keeps_its_own_helper_modules_in_its_origin(cli, tmp_path, monkeypatch):
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "helper_of_sibling_49.py").write_text("SCALE = 1.0\n")
    sibling = folder / "sibling_with_helper_49.py"
    sibling.write_text("from helper_of_sibling_49 import SCALE  # noqa: F401\n" + LAYER.format(cls="Sib2", name="sib2"))
    main = folder / "main.py"
    main.write_text(
        "import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).parent))\n"
        "import sibling_with_helper_49  # noqa: E402,F401\n"
    )
    for name in ("sibling_with_helper_49", "helper_of_sibling_49"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    rc, out, err = cli("plugins", "--include", main, "--json")
    assert rc == 0, err
    origin = json.loads(out)["maxbench.layers"]["sib2"]
    assert origin["path"] == str(sibling.resolve())
    assert list(origin["helpers"]) == [str((folder / "helper_of_sibling_49.py").resolve())]
    for name in ("sibling_with_helper_49", "helper_of_sibling_49"):
        sys.modules.pop(name, None)


def test_a_layer_defined_in_the_included_file_keeps_that_file_as_its_origin(cli, tmp_path):
    plugin = tmp_path / "own.py"
    plugin.write_text(LAYER.format(cls="Own", name="own"))
    rc, out, err = cli("plugins", "--include", plugin, "--json")
    assert rc == 0, err
    assert json.loads(out)["maxbench.layers"]["own"]["path"] == str(plugin.resolve())
